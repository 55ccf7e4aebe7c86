"""From llama.cpp facts (extract_llamacpp.py) to the rules of matrices/generated/llama.cpp.toml.

A pure function of the facts file, so ``extract_llamacpp.py --check`` re-derives the rules offline.

Every answer is a *cell*: a tensor type on a backend (does a GGUF holding it load, run on the GPU, fall back to the
CPU, abort), or a (K, V) cache pair on a backend with -fa left alone, on or off. Each build read gives each cell a
class; a run of consecutive builds read with the same class becomes (with the other cells of the same run) one rule:
``verified`` is the run (its first and last build, both read), ``versions`` reaches from just after the last build
read with another class to just before the next one. So a build between two runs read is matched by a rule that was
not read there: qcheck answers ``unknown`` for it, naming the builds read, and never carries a class across a change.

* ``ggml-types``: a GGUF holding a type outside the build's ``enum ggml_type`` does not load (every backend, above
  the backend rules: priority 5); a type no build read has is refused at every build;
* ``mul-mat``: a type a backend's supports_op refuses runs on the CPU backend (``fallback``);
* ``mul-mat-abort``: a type Metal or SYCL accepts without a kernel for it stops the process (``unsupported``);
* ``flash-attn`` x ``fa-auto`` x ``kv-cache-types``: per backend and (K, V) cache pair, what -fa auto (the default),
  -fa on and -fa off do; two unquantised types without flash attention are how a build runs by default and get no
  rule. A fact recorded as ``unread: ...`` gives an ``unknown`` rule saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

COMMAND = "python matrices/tools/extract_llamacpp.py"
UNQUANTISED = ("f32", "f16", "bf16")
BACKENDS = ("cuda", "rocm", "metal", "vulkan", "sycl", "cpu")
NAMES = {"cuda": "CUDA", "rocm": "ROCm (HIP)", "metal": "Metal", "vulkan": "Vulkan", "sycl": "SYCL", "cpu": "CPU"}
NOT_WEIGHTS = frozenset({"Q8_1", "Q8_K", "I8", "I16", "I32", "I64", "F64"})

Steps = list[dict[str, Any]]
Hist = dict[tuple[str, str], Steps]
#: a cell's class at one build (None: no rule, the base rules of the engine file answer)
Cls = str | None


def _unread(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("unread")


class Deriver:
    """Builds the generated file's sources and rules from the histories."""

    def __init__(self, manifests: dict[str, dict[str, str]], hist: Hist, packages: dict[str, str]) -> None:
        self.order = list(manifests)
        self.hist = hist
        self.packages = packages
        self.sources: dict[str, dict[str, str]] = {}
        self.rules: list[dict[str, Any]] = []
        self.kv_rules: list[dict[str, Any]] = []

    # -- facts and their sources ---------------------------------------------------------------------------------

    def value(self, key: tuple[str, str], build: str) -> Any:
        step = self.step(key, build)
        return None if step is None else step["value"]

    def step(self, key: tuple[str, str], build: str) -> dict[str, Any] | None:
        i = self.order.index(build)
        for s in self.hist.get(key, []):
            if self.order.index(s["from"]) <= i <= self.order.index(s["to"]):
                return s
        return None

    def cite(self, key: tuple[str, str], start: str, end: str, what: str) -> list[str]:
        """The source names of every step of ``key`` overlapping the builds start..end."""
        a, b = self.order.index(start), self.order.index(end)
        out = []
        for s in self.hist.get(key, []):
            if self.order.index(s["to"]) < a or self.order.index(s["from"]) > b:
                continue
            name = re.sub(r"[^a-z0-9]+", "_", f"{key[0]}_{key[1]}_{s['from']}".lower()).strip("_")
            if name not in self.sources:
                span = s["from"] if s["from"] == s["to"] else f"{s['from']}-{s['to']}"
                packs = self.packages[s["from"]] if s["from"] == s["to"] else \
                    f"{self.packages[s['from']]} .. {self.packages[s['to']]}"
                where = s["lines_from"] if s["lines_from"] == s["lines_to"] else \
                    f"{s['lines_from']} ({s['from']}) .. {s['lines_to']} ({s['to']})"
                self.sources[name] = {"ref": f"ggml-org/llama.cpp: {where or 'not read'} ({what}); read in {packs}",
                                      "version": span}
            out.append(name)
        return out

    # -- runs ----------------------------------------------------------------------------------------------------

    def runs(self, classes: list[Cls]) -> list[tuple[Cls, int, int, int | None, int | None]]:
        """(class, first, last, previous run's last, next run's first) as indexes into the builds read."""
        out: list[tuple[Cls, int, int, int | None, int | None]] = []
        start = 0
        for i in range(1, len(classes) + 1):
            if i == len(classes) or classes[i] != classes[start]:
                out.append((classes[start], start, i - 1, start - 1 if start else None,
                            i if i < len(classes) else None))
                start = i
        return out

    def span(self, first: int, last: int, prev: int | None, nxt: int | None) -> tuple[str | None, str]:
        """(versions, verified) of a run: read at first..last, about the builds after prev and before nxt."""
        bounds = [f">{self.order[prev]}"] if prev is not None else []
        bounds += [f"<{self.order[nxt]}"] if nxt is not None else []
        a, b = self.order[first], self.order[last]
        return (",".join(bounds) or None), (a if a == b else f">={a},<={b}")

    def grouped(self, cells: dict[Any, list[Cls]]) -> dict[tuple[Cls, int, int, int | None, int | None], list[Any]]:
        """Cells with the same run of the same class, grouped (in the cells' order)."""
        out: dict[tuple[Cls, int, int, int | None, int | None], list[Any]] = {}
        for cell, classes in cells.items():
            for run in self.runs(classes):
                if run[0] is not None:
                    out.setdefault(run, []).append(cell)
        return out

    # -- weights -------------------------------------------------------------------------------------------------

    def weights(self) -> None:
        key = ("ggml-types", "ggml_type")
        per_build = [self.value(key, b) for b in self.order]
        known = sorted({t for v in per_build if isinstance(v, list) for t in v}, key=lambda t: _first_index(per_build, t))
        refuse = next((s["value"] for s in self.hist.get(("gguf-refuses", "unknown type"), []) if not
                       _unread(s["value"])), "")
        quote = f" ('{refuse}')" if refuse else ""
        srcs = self.cite(key, self.order[0], self.order[-1], "enum ggml_type: the tensor types a GGUF may hold") + \
            self.cite(("gguf-refuses", "unknown type"), self.order[0], self.order[-1],
                      "gguf_init_from_file_impl refuses a tensor type outside enum ggml_type")
        self._rule("gguf-types-unknown", None, f">={self.order[0]},<={self.order[-1]}",
                   {"gguf_types_any_not_in": known}, "unsupported", srcs, backend=list(BACKENDS), priority=6,
                   reasons=[f"{{types}}: not a tensor type of any llama.cpp build read ({self.order[0]}-"
                            f"{self.order[-1]}; ik_llama.cpp-only IQ*_K types, removed Q4_0_4_x/IQ4_NL_4_x repacks, "
                            f"unknown ids): gguf.cpp refuses the file{quote}"])
        cells: dict[Any, list[Cls]] = {}
        for t in known:
            cells[t] = [("unread" if _unread(v) else None if t in v else "absent") if v is not None else "unread"
                        for v in per_build]
        for (cls, first, last, prev, nxt), types in self.grouped(cells).items():
            versions, verified = self.span(first, last, prev, nxt)
            a, b = self.order[first], self.order[last]
            srcs = self.cite(key, a, b, "enum ggml_type: the tensor types a GGUF may hold")
            if cls == "unread":
                self._rule(f"gguf-types-unread-{a}-{b}", versions, verified, {"gguf_types_any_in": types}, "unknown",
                           srcs, backend=list(BACKENDS), priority=5,
                           reasons=["whether llama.cpp {version} knows the tensor types {types} was not read"])
                continue
            srcs += self.cite(("gguf-refuses", "unknown type"), a, b,
                              "gguf_init_from_file_impl refuses a tensor type outside enum ggml_type")
            self._rule(f"gguf-types-absent-{a}-{b}", versions, verified, {"gguf_types_any_in": types}, "unsupported",
                       srcs, backend=list(BACKENDS), priority=5, reasons=[
                           f"{{types}}: not a tensor type of llama.cpp {{version}} (enum ggml_type, read at {a}"
                           f"{'' if a == b else '-' + b}; added later): gguf.cpp refuses the file{quote}"])
        for backend in BACKENDS[:-1]:
            self._backend_weights(backend, per_build)

    def _backend_weights(self, backend: str, per_build: list[Any]) -> None:
        name = NAMES[backend]
        mm, ab = ("mul-mat", backend), ("mul-mat-abort", backend)
        refused = [self.value(mm, b) for b in self.order]
        aborts = [self.value(ab, b) for b in self.order]
        cells: dict[Any, list[Cls]] = {}
        for i, types in enumerate(per_build):
            if not isinstance(types, list):
                continue
            for t in types:
                if t in NOT_WEIGHTS:
                    continue
                cells.setdefault(t, [None] * len(self.order))[i] = _weight_class(t, refused[i], aborts[i])
        for (cls, first, last, prev, nxt), types in self.grouped(cells).items():
            versions, verified = self.span(first, last, prev, nxt)
            a, b = self.order[first], self.order[last]
            srcs = self.cite(mm, a, b, f"{name} supports_op for GGML_OP_MUL_MAT")
            ident = f"gguf-{backend}-{cls}-{a}-{b}"
            match = {"gguf_types_any_in": types}
            if cls == "cpu":
                self._rule(ident, versions, verified, match, "fallback", srcs, backend=backend, priority=1,
                           kernel=f"the CPU backend for the {{types}} matmuls (the rest on {name})",
                           reasons=[f"{name}'s supports_op in llama.cpp {{version}} takes no {{types}} matmul: the "
                                    "scheduler runs those layers on the CPU backend (correct, slow, extra copies)"])
            elif cls == "no-kernel":
                what, why = _ABORT[backend]
                self._rule(ident, versions, verified, match, "unsupported",
                           srcs + self.cite(ab, a, b, what), backend=backend, priority=2, reasons=[
                               f"{name}'s supports_op in llama.cpp {{version}} accepts {{types}} matmuls, but {why}"])
            else:
                self._rule(ident, versions, verified, match, "unknown", srcs + self.cite(ab, a, b, "kernel table"),
                           backend=backend, priority=3, reasons=[
                               f"which GGUF types the {name} backend of llama.cpp {{version}} runs (or has kernels "
                               f"for) was not read: {_first_unread(refused[first], aborts[first])}"])

    def _rule(self, ident: str, versions: str | None, verified: str, match: dict[str, Any], status: str,
              sources: list[str], *, backend: str | list[str] | None, reasons: list[str], priority: int = 0,
              kernel: str = "") -> None:
        rule: dict[str, Any] = {"id": ident}
        if versions:
            rule["versions"] = versions
        rule["verified"] = verified
        rule["methods"] = ["gguf"]
        if backend:
            rule["backend"] = backend
        if match:
            rule["match"] = match
        rule["status"] = status
        if kernel:
            rule["kernel"] = kernel
        rule["reasons"] = reasons
        if priority:
            rule["priority"] = priority
        rule["sources"] = sources
        self.rules.append(rule)

    # -- KV cache ------------------------------------------------------------------------------------------------

    def kv(self) -> None:
        era_key, types_key = ("fa-auto", "quantised V"), ("kv-cache-types", "--cache-type-k/-v")
        eras = [self.value(era_key, b) for b in self.order]
        types = [self.value(types_key, b) for b in self.order]
        kv = list(dict.fromkeys(t.lower() for v in types if isinstance(v, list) for t in v))
        for backend in BACKENDS:
            fa_key = ("flash-attn", backend)
            fas = [self.value(fa_key, b) for b in self.order]
            for knob in (None, True, False):
                cells = {f"{k}-{v}": [_kv_class(eras[i], fas[i], types[i], k, v, knob) for i in range(len(self.order))]
                         for k in kv for v in kv}
                self._kv_group(backend, knob, cells, (eras, fas, types))
        self._merge_backends()

    def _kv_group(self, backend: str, knob: bool | None, cells: dict[Any, list[Cls]], facts: tuple[list[Any], ...]
                  ) -> None:
        """One rule per run of builds and class of the pairs' cells (one -fa setting)."""
        for (cls, first, last, prev, nxt), pairs in self.grouped(cells).items():
            a, b = self.order[first], self.order[last]
            srcs = (self.cite(("fa-auto", "quantised V"), a, b, "llama_init_from_model / the context: what -fa auto "
                                                              "does with a quantised V cache")
                    + self.cite(("flash-attn", backend), a, b, f"{NAMES[backend]} supports_op for "
                                                               "GGML_OP_FLASH_ATTN_EXT and the kernels it dispatches to")
                    + self.cite(("kv-cache-types", "--cache-type-k/-v"), a, b, "kv_cache_types (--cache-type-k/-v)"))
            unread = next((str(x[first]) for x in facts if _unread(x[first])), "")
            self._kv_rule(backend, str(cls), knob, self.span(first, last, prev, nxt), pairs, srcs, unread, a, b)

    def _kv_rule(self, backend: str, cls: str, knob: bool | None, span: tuple[str | None, str], pairs: list[str],
                 srcs: list[str], unread: str, a: str, b: str) -> None:
        suffix = {None: "", True: "-fa-on", False: "-fa-off"}[knob]
        tail = f"{cls}{suffix}-{a}" + ("" if a == b else f"-{b}")
        rule: dict[str, Any] = {"id": f"kv-{backend}-{tail}", "_tail": tail}
        versions, verified = span
        if versions:
            rule["versions"] = versions
        rule["verified"] = verified
        rule["backend"] = [backend]
        rule["pairs"] = pairs
        rule["knobs"] = {"flash_attn": "null" if knob is None else knob}  # null: -fa left alone (auto)
        status, kernel, reasons, warnings = _kv_texts(cls, knob, NAMES[backend], unread)
        rule["status"] = status
        if kernel:
            rule["kernel"] = kernel
        if reasons:
            rule["reasons"] = reasons
        if warnings:
            rule["warnings"] = warnings
        rule["sources"] = srcs
        self.kv_rules.append(rule)

    def _merge_backends(self) -> None:
        """Rules equal but for the backend (CUDA and ROCm compile the same kernels) become one rule."""
        merged: list[dict[str, Any]] = []
        index: dict[str, dict[str, Any]] = {}
        for rule in self.kv_rules:
            shape = json.dumps({k: v for k, v in rule.items() if k not in ("id", "backend", "sources")},
                               sort_keys=True)
            into = index.get(shape)
            if into is None:
                index[shape] = rule
                merged.append(rule)
                continue
            into["backend"].append(rule["backend"][0])
            into["id"] = f"kv-{'-'.join(into['backend'])}-{into['_tail']}"
            into["sources"] += [s for s in rule["sources"] if s not in into["sources"]]
        self.kv_rules = merged


def _first_index(per_build: list[Any], t: str) -> tuple[int, int]:
    for i, v in enumerate(per_build):
        if isinstance(v, list) and t in v:
            return i, v.index(t)
    return len(per_build), 0


def _first_unread(*values: Any) -> str:
    return next((str(v) for v in values if _unread(v)), "not read")


def _weight_class(t: str, refused: Any, aborts: Any) -> Cls:
    """A type's class on a backend at one build: None (runs on it), cpu, no-kernel, unread."""
    if refused is None or _unread(refused):
        return "unread"
    if t in refused:
        return "cpu"
    if aborts is None:
        return None
    if _unread(aborts):
        return "unread"
    return "no-kernel" if t in aborts else None


_ABORT = {
    "metal": ("the matrix-vector pipeline's type switch (ggml_metal_library_get_pipeline_mul_mv; before it, "
              "ggml-metal.m's MUL_MV kernels)",
              "its matrix-vector pipeline has no case for them: GGML_ABORT(\"not implemented\") at the first token"),
    "sycl": ("ggml_get_to_fp16_sycl (the dequantisers of batched matmuls)",
             "ggml_get_to_fp16_sycl has no dequantiser for them (it returns nullptr): the first prompt batch stops "
             "on GGML_ASSERT(to_fp16_sycl != nullptr)"),
}


def _kv_class(era: Any, fa: Any, types: Any, k: str, v: str, knob: bool | None) -> Cls:
    """What one build does with the (k, v) cache pair, with -fa left alone (None), on (True) or off (False)."""
    if not isinstance(types, list) or any(_unread(x) for x in (era, fa)) or era is None or fa is None:
        return "unread" if (k not in UNQUANTISED or v not in UNQUANTISED) else None
    if k.upper() not in types or v.upper() not in types:
        return None  # [kv_cache] accepts refuses it
    plain, quantised_v = k in UNQUANTISED and v in UNQUANTISED, v not in UNQUANTISED
    pair = f"{k}-{v}"
    old = era == "off-by-default"
    if knob is False or (knob is None and old):
        if plain:
            return None  # two unquantised types without flash attention: how the build runs by default
        if quantised_v:
            return "refused-off-old" if old else "refused-off"
        return "no-fa-default" if (old and knob is None) else "no-fa-off"
    if pair in fa["native"]:
        return "native"
    if pair in fa["converted"]:
        return "converted"
    if pair in fa.get("no_kernel", []):
        return "no-kernel"
    if knob is True:
        return "fa-cpu-on"
    if quantised_v:
        return "fa-cpu" if era == "auto-enables" else "refused"
    return "no-fa"


_SLOW = "more memory for the attention scores, slower at long context"
_CPU_RUN = ("the scheduler runs that op on the CPU for every layer ('... is assigned to device CPU (usually due to "
            "missing support)'): it runs, far slower (issue #27109: prefill about 34 t/s instead of about 1147 t/s on "
            "an RTX 3090)")
_NO_FA = "attention without flash attention (K·Q and KQ·V matmuls on the GPU, reading the {k} K cache)"


def _kv_texts(cls: str, knob: bool | None, name: str, unread: str) -> tuple[str, str, list[str], list[str]]:
    """(status, kernel, reasons, warnings) of a KV rule's class."""
    lead = "-fa on: " if knob is True else ""
    texts: dict[str, Callable[[], tuple[str, str, list[str], list[str]]]] = {
        "native": lambda: ("native", (
            "{backend} flash attention: the {k}-{v} vector kernel compiled by default (token generation; prompt "
            "batches use the tensor-core kernels)") if name in ("CUDA", "ROCm (HIP)") else
            "{backend} flash attention reading the {k} K and {v} V cache", [], []),
        "converted": lambda: ("fallback", "the f16-f16 flash-attention kernel after converting K and V to f16 on "
                              "every attention call", [
            f"{lead}no flash-attention vector kernel is compiled for {{k}}-{{v}} in a default build (GGML_CUDA_FA_QUANTS "
            "= q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16): llama.cpp logs 'no FlashAttention vector kernel compiled for "
            "K/V types {k}-{v}, converting K and V to f16 instead (slow). Add \"{k}-{v}\" to GGML_CUDA_FA_QUANTS to "
            "compile it.' The cache keeps its size; every token pays a conversion of the cache to f16"], [
            "a build with GGML_CUDA_FA_QUANTS=all (or \"{k}-{v}\" in the list) runs this pair natively; the release "
            "builds use the default list"]),
        "fa-cpu": lambda: ("fallback", "flash attention on the CPU backend (the {backend} flash attention does not "
                           "take {k}-{v})", [
            "llama.cpp {version} turns flash attention on for a quantised V cache ('enabling flash_attn since it is "
            f"required for quantized V cache'), and the {{backend}} flash attention does not take a {{k}}-{{v}} "
            f"cache: {_CPU_RUN}"], []),
        "fa-cpu-on": lambda: ("fallback", "flash attention on the CPU backend (the {backend} flash attention does not "
                              "take {k}-{v})", [
            f"-fa on: the {{backend}} flash attention does not take a {{k}}-{{v}} cache: {_CPU_RUN}"], []),
        "no-fa": lambda: ("fallback", _NO_FA, [
            "the {backend} flash attention does not take a {k}-{v} cache: -fa auto turns flash attention off and "
            f"attention runs without it ({_SLOW})"], []),
        "no-fa-default": lambda: ("fallback", _NO_FA, [
            f"llama.cpp {{version}} runs attention without flash attention unless -fa is given ({_SLOW}); the quantised "
            "K cache is read by the matmul kernels"], []),
        "no-fa-off": lambda: ("fallback", _NO_FA, [
            f"-fa off: attention runs as separate matmuls and softmax ({_SLOW}); the quantised K cache is read by "
            "the matmul kernels"], []),
        "refused": lambda: ("unsupported", "", [
            "the {backend} flash attention does not take a {k}-{v} cache: -fa auto turns flash attention off in "
            "llama.cpp {version} ('Flash Attention was auto, set to disabled') and then refuses the quantised V "
            "cache: 'quantized V cache was requested, but this requires Flash Attention' (-fa on runs the op on the "
            "CPU instead)"], []),
        "refused-off": lambda: ("unsupported", "", [
            "-fa off with a quantised V cache: llama.cpp {version} refuses it ('quantized V cache requires flash_attn "
            "to be enabled')"], []),
        "refused-off-old": lambda: ("unsupported", "", [
            "llama.cpp {version} runs without flash attention unless -fa is given, and refuses a quantised V cache "
            "without it: 'V cache quantization requires flash_attn' (pass -fa)"], []),
        "no-kernel": lambda: ("unsupported", "", [
            f"{lead}Metal's supports_op takes a {{k}}-{{v}} flash attention, but the Metal library has no "
            "kernel_flash_attn_ext_{k} kernel: the pipeline fails to build ('failed to compile pipeline') when "
            "attention first runs"], []),
    }
    if cls in texts:
        return texts[cls]()
    return "unknown", "", [f"what the {{backend}} flash attention takes in llama.cpp {{version}} was not read: "
                           f"{unread or 'not read'}"], []


def derive(manifests: dict[str, dict[str, str]], hist: Hist, releases: Sequence[Any]) -> dict[str, Any]:
    """The generated file's content: header, sources, rules and KV rules."""
    packages = {r.build: f"{r.package} {r.version}" for r in releases}
    d = Deriver(manifests, hist, packages)
    d.weights()
    d.kv()
    return {"releases": list(manifests), "sources": d.sources, "rules": d.rules, "kv_rules": d.kv_rules}


def toml_value(value: Any) -> str:
    """Inline TOML for the values facts and rules hold (strings, booleans, ints, lists, tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"


def render_rules(content: dict[str, Any]) -> str:
    lines = [
        f"# llama.cpp rules read from its released source, build by build. GENERATED by {COMMAND}; do not edit.",
        "# The facts they come from: generated/llama.cpp.facts.toml. Hand-written rules: engines/llama.cpp.toml.",
        "",
        "[generated]",
        'engine = "llama.cpp"',
        f'generated_by = "{COMMAND}"',
        f"releases = {toml_value(content['releases'])}",
        'facts = "generated/llama.cpp.facts.toml"',
        "",
        "[sources]",
    ]
    lines += [f"{name} = {toml_value(src)}" for name, src in content["sources"].items()]
    for table, rules in (("rule", content["rules"]), ("kv_rule", content["kv_rules"])):
        for rule in rules:
            lines += ["", f"[[{table}]]"] + [f"{k} = {toml_value(v)}" for k, v in rule.items() if not k.startswith("_")]
    return "\n".join(lines) + "\n"
