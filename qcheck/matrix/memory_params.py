"""Per-engine memory parameters: the ``[memory]`` table of ``matrices/engines/<id>.toml``, validated.

What an engine reserves beyond weights and KV cache (llama.cpp's compute buffers and ``--fit`` margin, vLLM's
``gpu_memory_utilization``, SGLang's ``mem_fraction_static`` ...) is engine knowledge, so it lives with the
engine's data, each value with its sources; the engine families in ``qcheck/memory/families.py`` only combine them.
An engine without a ``[memory]`` table gets "overhead unknown", never another engine's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from qcheck.matrix.vocab import SOURCE_KEYS, SourceSpec, Where, check_keys, require_str, type_name

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

#: the formula families qcheck/memory/families.py implements (docs/memory.md derives each)
FORMULAS = ("llama.cpp", "vllm", "sglang", "tensorrt-llm", "transformers", "mlx")
PLACEMENTS = ("layer-split", "tensor")

#: key -> (kind, meaning); kinds: int, number, fraction (0 < x <= 1), flag (0 or 1), string, strings (list of
#: strings), names (list of strings, possibly empty: "none of them"), buckets (list of number lists, the first column strictly increasing)
MEMORY_KEYS: dict[str, tuple[str, str]] = {
    "formula": ("string", "which formula family combines these parameters"),
    "placement": ("string", "how the model is spread over several GPUs: layer-split or tensor"),
    "sources": ("strings", "names from [memory.sources]"),
    "note": ("string", "free text"),
    # every GPU engine: what the device runtime holds before the engine measures free memory
    "context_mib": ("number", "CUDA/HIP context (plus NCCL and cuBLAS handles) held before the engine's first "
                              "free-memory reading, one GPU"),
    "context_mib_multi_gpu": ("number", "the same with several GPUs (NCCL buffers set up first)"),
    "context_mib_amd": ("number", "the same on AMD GPUs (HIP runtime)"),
    # llama.cpp family
    "n_ubatch": ("int", "physical batch: tokens per compute-graph evaluation (-ub)"),
    "n_batch": ("int", "logical batch (-b)"),
    "n_seq": ("int", "parallel sequences (slots) by default (-np)"),
    "kv_unified": ("flag", "1 when the default slots share one KV pool of n_ctx cells (llama-server -np auto)"),
    "server_output_rows": ("flag", "1 when the compute graph reserves one output row per slot (llama-server since "
                                   "b9460), 0 when every ubatch token is an output row"),
    "ngl_rule": ("string", "how -ngl N counts: output-first (the output layer, then the last N-1 repeating "
                           "layers), output-last (the last N repeating layers, the output layer only above "
                           "n_layer), or either (a build between the two: plans fit both)"),
    "fit": ("flag", "1 when --fit is on by default (fits context and layers to free memory)"),
    "kv_pad": ("int", "the KV cache size is padded to a multiple of this many tokens"),
    "flash_attn": ("flag", "1 when flash attention is on by default (smaller compute buffer), 0 when off"),
    "fit_margin_mib": ("number", "memory --fit leaves free on each device"),
    "fit_min_ctx": ("int", "the smallest context --fit reduces to"),
    "default_context": ("int", "context when none is asked for (0 = the model's own)"),
    "default_context_by_vram": ("buckets", "[[below_gib, context], ...]: default context by GPU memory"),
    "host_reserve_mib": ("number", "memory the engine keeps free on a GPU before placing layers"),
    # server family (vLLM)
    "gpu_memory_utilization": ("fraction", "share of the whole GPU weights + activations + KV must fit in"),
    "gpu_memory_utilization_max": ("fraction", "the largest value the engine accepts"),
    "extensible_kv": ("flag", "1 when the KV cache is sized after warmup from measured free memory "
                              "(vLLM 0.34 extensible KV cache), 0 for profile-and-subtract"),
    "batch_defaults": ("buckets", "[[below_gib, max_num_batched_tokens, max_num_seqs], ...] by GPU memory"),
    "batch_small_gpus": ("names", "products kept on the first batch_defaults row whatever their memory"),
    "sampler_sort": ("flag", "1 when the sampler's top-k/top-p step sorts the logits (torch.sort: 32 B per entry), "
                             "0 for an in-place kernel (Triton, FlashInfer: 8 B)"),
    "sampler_buffer_rows": ("int", "rows of the Triton top-k/top-p kernel's per-SM buffer (0: none)"),
    "cublas_workspace_mib": ("number", "the cuBLAS workspace PyTorch allocates through its caching allocator"),
    "forward_hidden_tensors": ("int", "hidden-sized activations alive per token at the forward pass's MLP"),
    "forward_ff_tensors": ("int", "feed-forward-sized activations alive per token at the MLP (per rank)"),
    "moe_workspace_persistent": ("flag", "1 when the fused-MoE workspace stays allocated after the forward pass "
                                         "(vLLM's WorkspaceManager)"),
    "non_torch_mib": ("number", "memory outside torch created after the engine's snapshot, one GPU"),
    "non_torch_mib_multi_gpu": ("number", "the same under tensor parallelism on an NVSwitch system (NCCL NVLink "
                                          "SHARP buffers)"),
    "non_torch_mib_multi_gpu_no_nvls": ("number", "the same under tensor parallelism without NVLink SHARP (PCIe, "
                                                  "NVLink bridges, Ampere)"),
    "nvls_gpus": ("names", "products NCCL sets up NVLink SHARP buffers on (NVSwitch systems)"),
    "context_in_budget": ("flag", "1 when the CUDA context counts in the non-torch memory inside the budget "
                                  "(vLLM before 0.9)"),
    "graphs_subtracted": ("flag", "1 when the CUDA-graph estimate is taken from the KV budget"),
    "graph_capture_max": ("int", "the largest CUDA-graph capture size (min(2 x max_num_seqs, this))"),
    "graph_first_mib": ("number", "CUDA graph estimate: the first capture of each mode"),
    "graph_mib_per_size_layer": ("number", "CUDA graph estimate per further capture size per decoder layer"),
    "mxfp4_moe_backends": ("strings", "'arch:backend' (or 'vendor:backend', '*:backend'): the MXFP4 MoE kernel "
                                      "and so the weight layout (qcheck.memory.held)"),
    "warmup_margin_min_mib": ("number", "extensible KV: the least kept free beside the activation peak"),
    "warmup_margin_fraction": ("number", "extensible KV: the margin as a share of the activation peak"),
    "kv_fraction_of_free": ("fraction", "share of the memory left after weights and activations the KV gets"),
    "max_num_batched_tokens": ("int", "tokens of the profiling forward pass"),
    "max_num_seqs": ("int", "sequences of the profiling forward pass (logits rows)"),
    "large_gpu_gib": ("number", "SGLang: above this GPU size the reservation has a floor"),
    "activation_bytes_per_token_hidden": ("number", "live activation bytes per token per hidden unit"),
    "activation_bytes_per_token_ff": ("number", "live activation bytes per token per feed-forward unit (MoE: the "
                                                "active experts' width)"),
    "runtime_mib": ("number", "CUDA context, cuBLAS/NCCL workspaces (not allocator-visible)"),
    # SGLang
    "reserve_buckets": ("buckets", "[[below_gib, chunked_prefill_size, cuda_graph_max_bs (tp < 4), "
                                   "cuda_graph_max_bs (tp >= 4)], ...] by nvidia-smi memory"),
    "reserve_base_mib": ("number", "constant part of the reserved memory"),
    "reserve_mib_per_prefill_token": ("number", "reserved MiB per chunked-prefill token"),
    "reserve_mib_per_graph_seq": ("number", "reserved MiB per CUDA-graph batch entry"),
    "reserve_mib_per_tp": ("number", "reserved MiB per tensor-parallel rank"),
    "reserve_min_mib_large": ("number", "the least reserved on GPUs above large_gpu_gib"),
    "reserve_mib_per_prefill_graph": ("number", "reserved MiB per captured prefill graph size (non-MLA)"),
    "reserve_mib_prefill_graphs_mla": ("number", "reserved MiB for prefill graphs with an MLA model"),
    "prefill_graph_steps": ("buckets", "[[first, last, step], ...]: the prefill CUDA-graph token sizes"),
    "prefill_graph_vendors": ("strings", "GPU vendors prefill CUDA graphs are captured on by default"),
    # unified memory
    "wired_fraction": ("fraction", "share of unified memory the GPU may wire by default"),
}
#: the values a string key may take
STRING_CHOICES = {"ngl_rule": ("output-first", "output-last", "either")}
#: the MXFP4 MoE kernel layouts qcheck/memory/held.py knows (the part after the colon of mxfp4_moe_backends)
MXFP4_BACKENDS = ("marlin", "triton", "triton-strided", "flashinfer-trtllm", "flashinfer-cutlass", "rocm")
#: keys a [[memory.versions]] entry may not change
FIXED_KEYS = ("formula", "placement")


@dataclass(frozen=True)
class VersionedParams:
    """A ``[[memory.versions]]`` entry: the values that hold for the engine versions ``versions`` names."""

    versions: SpecifierSet
    text: str
    params: dict[str, Any]
    buckets: dict[str, tuple[tuple[float, ...], ...]]
    sources: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class EngineMemory:
    """An engine's memory parameters (``[memory]``) and the sources they were read from; ``at(version)`` gives
    the parameters of one version (the base table with every matching ``[[memory.versions]]`` entry applied)."""

    engine: str
    formula: str
    placement: str
    params: dict[str, Any]
    sources: tuple[SourceSpec, ...]
    note: str | None = None
    buckets: dict[str, tuple[tuple[float, ...], ...]] = field(default_factory=dict)
    versions: tuple[VersionedParams, ...] = ()
    #: the version these parameters were resolved at (None: the base table, no version applied)
    version: str | None = None
    #: the notes of the version entries that applied
    version_notes: tuple[str, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def source_text(self) -> str:
        """The sources as one line: 'ref @ version; ...'."""
        return "; ".join(f"{s.ref} @ {s.version}" for s in self.sources)

    def at(self, version: Version | None, shown: str | None = None) -> EngineMemory:
        """The parameters at one engine version: each ``[[memory.versions]]`` entry whose range contains it
        overrides the base values, in file order (later entries win)."""
        if version is None or not self.versions:
            return self
        from qcheck.matrix.versions import contains

        params, buckets, notes = dict(self.params), dict(self.buckets), []
        for entry in self.versions:
            if contains(entry.versions, version):
                params.update(entry.params)
                buckets.update(entry.buckets)
                if entry.note:
                    notes.append(entry.note)
        return replace(self, params=params, buckets=buckets, version=shown or str(version),
                       version_notes=tuple(notes))

    def bucket(self, key: str, gpu_gib: float | None) -> tuple[float, ...] | None:
        """The row of a ``[[below_gib, ...]]`` table for a GPU of this size (the first whose bound is above it)."""
        rows = self.buckets.get(key)
        if not rows or gpu_gib is None:
            return None
        for row in rows:
            if gpu_gib < row[0]:
                return row[1:]
        return rows[-1][1:]


def parse_memory(raw: Any, engine_id: str, display: str, scheme: str = "pep440") -> EngineMemory:
    """Validate an engine file's ``[memory]`` table and its ``[[memory.versions]]`` (matrices/SCHEMA.md §2.7)."""
    ctx = Where(display, "[memory]")
    if not isinstance(raw, dict):
        ctx.fail("bad-type", f"[memory] must be a table, not {type_name(raw)}")
    raw_sources = raw.get("sources")
    raw_versions = raw.get("versions", [])
    body = {k: v for k, v in raw.items() if k not in ("sources", "versions")}
    check_keys(body, set(MEMORY_KEYS) - {"sources"}, {"formula", "placement"}, ctx)
    formula = require_str(body, "formula", ctx)
    if formula not in FORMULAS:
        ctx.fail("bad-type", f"formula {formula!r} is not one of {', '.join(FORMULAS)}")
    placement = require_str(body, "placement", ctx)
    if placement not in PLACEMENTS:
        ctx.fail("bad-type", f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    if not isinstance(raw_sources, dict) or not raw_sources:
        ctx.fail("missing-source", "[memory] needs a [memory.sources] table naming where each value was read")
    sources = []
    for name, spec in raw_sources.items():
        sctx = Where(display, f"[memory.sources] {name}")
        if not isinstance(spec, dict):
            sctx.fail("bad-type", "a source must be a table { ref = \"...\", version = \"...\" }")
        check_keys(spec, SOURCE_KEYS, {"ref", "version"}, sctx)
        sources.append(SourceSpec(name, require_str(spec, "ref", sctx), require_str(spec, "version", sctx),
                                  spec.get("note")))
    params, buckets = _values(body, ctx)
    note = body.get("note")
    versions = _versions(raw_versions, display, scheme, {s.name for s in sources})
    return EngineMemory(engine=engine_id, formula=formula, placement=placement, params=params,
                        sources=tuple(sources), note=note if isinstance(note, str) else None, buckets=buckets,
                        versions=versions)


def _values(body: dict[str, Any], ctx: Where) -> tuple[dict[str, Any], dict[str, tuple[tuple[float, ...], ...]]]:
    """The numeric, string and bucket values of a [memory] table or version entry, each checked by its kind."""
    params: dict[str, Any] = {}
    buckets: dict[str, tuple[tuple[float, ...], ...]] = {}
    for key, value in body.items():
        if key in ("formula", "placement", "note", "sources", "versions"):
            continue
        kind = MEMORY_KEYS[key][0]
        if kind == "buckets":
            buckets[key] = _buckets(key, value, ctx)
        elif kind in ("string", "strings", "names"):
            params[key] = _text(key, kind, value, ctx)
        else:
            params[key] = _number(key, kind, value, ctx)
    return params, buckets


def _text(key: str, kind: str, value: Any, ctx: Where) -> Any:
    items = value if kind in ("strings", "names") else [value]
    if not isinstance(items, list) or (not items and kind != "names") or not all(isinstance(v, str) and v
                                                                                  for v in items):
        want = {"strings": "a non-empty list of strings", "names": "a list of strings"}.get(kind, "a string")
        ctx.fail("bad-type", f"{key} must be {want}")
    choices = STRING_CHOICES.get(key)
    if key == "mxfp4_moe_backends" and any(v.partition(":")[2] not in MXFP4_BACKENDS for v in items):
        ctx.fail("bad-value", f"{key} = {value!r}: each entry is 'arch:backend' with a backend of "
                              f"{', '.join(MXFP4_BACKENDS)}")
    if choices and any(v not in choices for v in items):
        ctx.fail("bad-value", f"{key} = {value!r} is not one of {', '.join(choices)}")
    return tuple(items) if kind in ("strings", "names") else value


def _number(key: str, kind: str, value: Any, ctx: Where) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        ctx.fail("bad-type", f"{key} must be a number, not {type_name(value)}")
    if kind in ("int", "flag") and not isinstance(value, int):
        ctx.fail("bad-type", f"{key} must be an integer, not {value!r}")
    if value < 0 or (kind == "fraction" and not 0 < value <= 1) or (kind == "flag" and value not in (0, 1)):
        ctx.fail("bad-value", f"{key} = {value!r} is out of range" + {
            "fraction": " (0 < x <= 1)", "flag": " (0 or 1)"}.get(kind, " (must not be negative)"))
    return value


def _versions(raw: Any, display: str, scheme: str, source_names: set[str]) -> tuple[VersionedParams, ...]:
    """``[[memory.versions]]``: each entry a ``versions`` range, values that hold there, and the sources (names
    from ``[memory.sources]``) they were read from."""
    from qcheck.matrix.versions import parse_specifier

    if not isinstance(raw, list):
        Where(display, "[[memory.versions]]").fail("bad-type", "[[memory.versions]] must be an array of tables")
    out = []
    for i, entry in enumerate(raw):
        ctx = Where(display, f"[[memory.versions]] #{i + 1}")
        if not isinstance(entry, dict):
            ctx.fail("bad-type", "a [[memory.versions]] entry must be a table")
        allowed = (set(MEMORY_KEYS) - set(FIXED_KEYS)) | {"versions"}
        check_keys(entry, allowed, {"versions", "sources"}, ctx)
        text = require_str(entry, "versions", ctx)
        try:
            spec = parse_specifier(text, scheme)
        except ValueError as exc:
            ctx.fail("bad-version", str(exc))
        names = _text("sources", "strings", entry["sources"], ctx)
        unknown = [n for n in names if n not in source_names]
        if unknown:
            ctx.fail("unknown-source", f"sources {', '.join(unknown)} are not in [memory.sources]")
        params, buckets = _values(entry, ctx)
        if not params and not buckets:
            ctx.fail("missing-key", f"the entry for {text} changes no value")
        note = entry.get("note")
        out.append(VersionedParams(spec, text, params, buckets, tuple(names), note if isinstance(note, str) else None))
    return tuple(out)


def _buckets(key: str, value: Any, ctx: Where) -> tuple[tuple[float, ...], ...]:
    rows = value if isinstance(value, list) else None
    if not rows or not all(isinstance(r, list) and len(r) >= 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 for x in r)
            for r in rows):
        ctx.fail("bad-type", f"{key} must be a list of [below_gib, value, ...] number lists")
    widths = {len(r) for r in rows}
    bounds = [r[0] for r in rows]
    if len(widths) != 1 or bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
        ctx.fail("bad-value", f"{key}: rows must have the same length and strictly increasing below_gib bounds")
    return tuple(tuple(float(x) for x in r) for r in rows)
