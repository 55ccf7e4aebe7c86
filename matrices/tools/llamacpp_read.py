"""What one llama.cpp source tree says, per backend: the facts extract_llamacpp.py records for every build read.

Each reader takes the tree (a directory holding the files of ``FILES``, as unpacked by ``extract_llamacpp.py
fetch``) and returns ``Read(value, file, lines)``: a value that is plain TOML data, the file it came from and the
lines read. A tree whose code has a shape a reader does not know raises ``cpp_facts.Shape``: the fact is then
recorded as ``"unread: <why>"`` and no rule is generated from it (qcheck answers ``unknown`` there), never a guess.

The facts (kind, key):

* ``ggml-types`` / ``ggml_type``: the members of ``enum ggml_type`` (ggml/include/ggml.h), names without
  ``GGML_TYPE_``, in id order (commented-out members, the removed repacks, are not members);
* ``gguf-refuses`` / ``unknown type``: gguf.cpp's refusal of a tensor type outside the enum (its message);
* ``kv-cache-types`` / ``--cache-type-k``: ``kv_cache_types`` in common/arg.cpp;
* ``fa-auto`` / ``quantised V``: what llama_init_from_model / the context do with a quantised V cache when the
  user leaves flash attention alone: ``off-by-default`` (flash attention is a plain switch, off: a quantised V
  is refused), ``auto-refuses`` (-fa auto turns flash attention off where a backend lacks the op, then refuses
  the quantised V), ``auto-enables`` (-fa auto is switched on for a quantised V before the context is built);
* ``mul-mat`` / backend: the ggml types the backend's ``supports_op`` refuses for GGML_OP_MUL_MAT (those matmuls
  run on the CPU backend);
* ``mul-mat-abort`` / ``metal``: types Metal's ``supports_op`` accepts but whose matrix-vector pipeline has no
  case (``GGML_ABORT("not implemented")`` on the first matmul);
* ``flash-attn`` / backend: the (K, V) cache pairs the backend's flash-attention op takes, per K/V type of
  ``kv_cache_types`` (head size 128, an F32 query, no device limits beyond the common ones named in the fact).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpp_facts import (
    Env,
    Outcome,
    Shape,
    Source,
    case_body,
    enum_members,
    function_body,
    holds,
    matching,
    run,
)

#: the files of a llama.cpp tree the readers open (fetch unpacks only these)
FILES = (
    "ggml/include/ggml.h", "ggml/src/gguf.cpp", "common/arg.cpp", "src/llama-context.cpp",
    "ggml/CMakeLists.txt",
    "ggml/src/ggml-cuda/ggml-cuda.cu", "ggml/src/ggml-cuda/fattn.cu",
    "ggml/src/ggml-metal/ggml-metal.m", "ggml/src/ggml-metal/ggml-metal-device.m",
    "ggml/src/ggml-metal/ggml-metal-device.cpp",
    "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
    "ggml/src/ggml-sycl/ggml-sycl.cpp", "ggml/src/ggml-sycl/fattn.cpp", "ggml/src/ggml-sycl/common.hpp",
    "ggml/src/ggml-sycl/convert.cpp", "ggml/src/ggml-cpu/ggml-cpu.cpp",
    "ggml/src/ggml-metal/ggml-metal.metal", "ggml/src/ggml-metal/kernels/*.metal",
)

BACKENDS = ("cuda", "rocm", "metal", "vulkan", "sycl", "cpu")
UNQUANTISED = ("F32", "F16", "BF16")

#: conditions on shapes, strides, devices and other operands: in the common case (a weight matrix times F32
#: activations, a 128-wide head) they do not hold, so a `return false` behind them is not a refusal of the type
_SHAPE_ATOMS = re.compile(
    r"->ne\[|->nb\[|\bne\d\d\b|ggml_is_|ggml_nrows|ggml_n_dims|src\[[345]\]|op_params|ggml_get_op_params|use_fwht|"
    r"\bnb\d\d\b|\bmask\b|gqa|\bHS[KV]\b|head_sizes|->view_src|->buffer|->extra|ggml_backend_buffer|ggml_are_same|"
    r"ggml_cuda_should_use|ggml_cuda_info\(\)|\bcc\b|GGML_CUDA_CC_|ggml_element_size|buft|split|ggml_nbytes|contiguous|\(dst\)|\(op\)|mkl|onednn|sinks|max_bias|logit_softcap|\bres\b|pipeline")


@dataclass
class Read:
    """One fact read: the value, the file and the lines it was read from."""

    value: Any
    file: str
    lines: str


class Tree:
    """A llama.cpp source tree (only the files of FILES need be there)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, Source] = {}

    def has(self, path: str) -> bool:
        return (self.root / path).is_file()

    def source(self, path: str) -> Source:
        if path not in self._cache:
            if not self.has(path):
                raise Shape(f"no {path}")
            self._cache[path] = Source(path, (self.root / path).read_text(encoding="utf-8", errors="replace"))
        return self._cache[path]


# --------------------------------------------------------------------------------------------------------------
# types, loading, cache types, -fa auto

def ggml_types(tree: Tree) -> Read:
    src = tree.source("ggml/include/ggml.h")
    members = [(n, v, at) for n, v, at in enum_members(src.clean, "ggml_type") if n != "GGML_TYPE_COUNT"]
    if not members:
        raise Shape("enum ggml_type has no members")
    names = [n[len("GGML_TYPE_"):] for n, _, _ in sorted(members, key=lambda m: m[1])]
    return Read(names, src.path, src.lines(members[0][2], members[-1][2] + 1))


def gguf_refuses(tree: Tree) -> Read:
    src = tree.source("ggml/src/gguf.cpp")
    m = re.search(r"if\s*\(\s*info\.t\.type\s*<\s*0\s*\|\|\s*info\.t\.type\s*>=\s*GGML_TYPE_COUNT\s*\)\s*\{[^}]*?"
                  r"GGML_LOG_ERROR\(\s*\"%s: ([^\"]+?)\\n\"", src.clean, re.S)
    if not m:
        raise Shape("gguf.cpp: no refusal of a tensor type >= GGML_TYPE_COUNT")
    return Read(m.group(1), src.path, src.lines(m.start(), m.end()))


def kv_cache_types(tree: Tree) -> Read:
    src = tree.source("common/arg.cpp")
    m = re.search(r"kv_cache_types\s*=\s*\{([^}]*)\}", src.clean)
    if not m:
        raise Shape("common/arg.cpp: no kv_cache_types list")
    names = re.findall(r"GGML_TYPE_(\w+)", m.group(1))
    return Read(names, src.path, src.lines(m.start(), m.end()))


_FA_AUTO = (
    ("auto-enables", r"enabling flash_attn since it is required for quantized V cache"),
    ("auto-refuses", r"quantized V cache was requested, but this requires Flash Attention"),
    ("off-by-default", r"V cache quantization requires flash_attn"),
)


def fa_auto(tree: Tree) -> Read:
    """Which of the three behaviours llama-context.cpp has, by the messages that only that behaviour prints."""
    src = tree.source("src/llama-context.cpp")
    for value, message in _FA_AUTO:
        m = re.search(message, src.text)
        if not m:
            continue
        if value == "off-by-default" and "LLAMA_FLASH_ATTN_TYPE_AUTO" in src.clean:
            raise Shape("llama-context.cpp: flash attention has an auto setting but no known quantised-V message")
        return Read(value, src.path, src.lines(m.start(), m.end()))
    raise Shape("llama-context.cpp: none of the quantised-V messages")


# --------------------------------------------------------------------------------------------------------------
# supports_op per backend

@dataclass(frozen=True)
class Backend:
    """Where a backend decides: the file, its supports_op, the macros it is compiled with, the operand names."""

    file: str
    supports_op: tuple[str, ...]  # the function that decides (the first of these the file defines)
    macros: tuple[tuple[str, bool], ...] = ()
    names: tuple[tuple[str, bool], ...] = ()


_BACKEND: dict[str, Backend] = {
    "cuda": Backend("ggml/src/ggml-cuda/ggml-cuda.cu", ("ggml_backend_cuda_device_supports_op",),
                    (("GGML_USE_HIP", False), ("GGML_USE_MUSA", False), ("FLASH_ATTN_AVAILABLE", True),
                     ("GGML_CUDA_FA_ALL_QUANTS", False))),
    "rocm": Backend("ggml/src/ggml-cuda/ggml-cuda.cu", ("ggml_backend_cuda_device_supports_op",),
                    (("GGML_USE_HIP", True), ("GGML_USE_MUSA", False), ("FLASH_ATTN_AVAILABLE", True),
                     ("GGML_CUDA_FA_ALL_QUANTS", False))),
    "vulkan": Backend("ggml/src/ggml-vulkan/ggml-vulkan.cpp", ("ggml_backend_vk_device_supports_op",),
                      names=(("coopmat2", False), ("device->coopmat2", False), ("device->subgroup_shuffle", True),
                             ("device->subgroup_vote", True), ("device->fp16", True))),
    "sycl": Backend("ggml/src/ggml-sycl/ggml-sycl.cpp", ("do_ggml_backend_sycl_device_supports_op", "ggml_backend_sycl_device_supports_op"),
                    (("GGML_SYCL_FA_ALL_QUANTS", False),)),
    "cpu": Backend("ggml/src/ggml-cpu/ggml-cpu.cpp", ("ggml_backend_cpu_device_supports_op",)),
}

_METAL_NAMES = (("use_bfloat", True), ("has_simdgroup_reduction", True), ("has_simdgroup_mm", True), ("has_bfloat", True),
                ("props_dev->has_simdgroup_reduction", True), ("props_dev->has_simdgroup_mm", True),
                ("props_dev->has_bfloat", True), ("dev->props.has_simdgroup_reduction", True),
                ("dev->props.has_simdgroup_mm", True), ("dev->props.has_bfloat", True),
                ("ctx_dev->has_simdgroup_reduction", True), ("ctx_dev->has_simdgroup_mm", True),
                ("ctx_dev->has_bfloat", True), ("ctx->has_simdgroup_reduction", True),
                ("ctx->has_simdgroup_mm", True), ("ctx->has_bfloat", True))


def _metal(tree: Tree) -> Backend:
    if tree.has("ggml/src/ggml-metal/ggml-metal-device.m"):
        return Backend("ggml/src/ggml-metal/ggml-metal-device.m", ("ggml_metal_device_supports_op",), names=_METAL_NAMES)
    return Backend("ggml/src/ggml-metal/ggml-metal.m", ("ggml_metal_supports_op",), names=_METAL_NAMES)


def backend_of(tree: Tree, name: str) -> Backend:
    return _metal(tree) if name == "metal" else _BACKEND[name]


def decider(text: str, backend: Backend) -> tuple[int, int]:
    """The body of the backend's supports_op (the first of its candidate names defined in ``text``)."""
    for name in backend.supports_op:
        try:
            return function_body(text, name)
        except Shape:
            continue
    raise Shape(f"{backend.file}: none of {', '.join(backend.supports_op)}")


def _not_holding(atom: str) -> bool:
    return bool(_SHAPE_ATOMS.search(atom))


def _helpers(text: str, names: Iterable[str], env_of: Callable[[str, str], Env]
             ) -> dict[str, Callable[[str], bool | None]]:
    """Boolean helpers of the same file called with a type (``fa_kv_ok(t)``, ``ggml_cuda_fattn_kv_type_supported``):
    name -> f(type) that runs the helper's body for that type."""
    out: dict[str, Callable[[str], bool | None]] = {}
    for name in names:
        lam = re.search(rf"\bauto\s+{name}\s*=\s*\[[^\]]*\]\s*\(\s*\w+\s+(\w+)\s*\)\s*\{{", text)
        fn = re.search(rf"\b{name}\s*\(\s*(?:const\s+)?(?:enum\s+)?ggml_type\s+(\w+)\s*\)\s*\{{", text)
        m = lam or fn
        if not m:
            continue
        param, brace = m.group(1), m.end() - 1
        end = matching(text, brace) - 1

        def call(value: str, param: str = param, start: int = brace + 1, end: int = end) -> bool:
            out_ = run(text, start, end, env_of(param, value))
            if out_.kind != "return":
                raise Shape(f"helper ends with {out_.kind}")
            return holds(out_.value, env_of(param, value))
        out[name] = call
    return out


def _verdict(out: Outcome, env: Env, inline: Callable[[str, Env], bool | None] | None = None) -> bool:
    """True when a supports_op run accepts: ``return <true expression>``."""
    if out.kind == "abort":
        return False
    if out.kind != "return":
        raise Shape(f"supports_op ends with {out.kind} at offset {out.at}")
    if inline is not None:
        value = inline(out.value, env)
        if value is not None:
            return value
    return holds(out.value, env)


def _op_env(op: str, src0: str, backend: Backend, src1: str = "GGML_TYPE_F32", src2: str | None = None) -> Env:
    subjects = {"op->op": op, "op->src[0]->type": src0, "a->type": src0, "a_type": src0, "src0_type": src0,
                "src0->type": src0, "src0t": src0, "op->src[1]->type": src1, "b->type": src1, "src1->type": src1,
                "src1_type": src1, "op->type": "GGML_TYPE_F32", "op->src[0]->ne[0]": "128",
                "op->src[1]->ne[0]": "128", "op->src[2]->ne[0]": "128"}
    if src2 is not None:
        subjects.update({"op->src[2]->type": src2})
    return Env(subjects, dict(backend.names), _not_holding)


def mul_mat(tree: Tree, backend_name: str, types: list[str]) -> Read:
    """The types supports_op refuses for GGML_OP_MUL_MAT on this backend (CPU: none; read from its code too)."""
    b = backend_of(tree, backend_name)
    src = tree.source(b.file)
    text = src.configured(dict(b.macros))
    start, end = decider(text, b)
    inline = _inliner(text, b)
    refused = [t for t in types if not _verdict(run(text, start, end, env := _op_env(
        "GGML_OP_MUL_MAT", "GGML_TYPE_" + t, b)), env, inline)]
    cs, ce = case_body(text, start, end, "GGML_OP_MUL_MAT")
    return Read(refused, src.path, src.lines(cs, ce))


def _inliner(text: str, backend: Backend) -> Callable[[str, Env], bool | None]:
    """A return value that calls a function of the same file with the op (``ggml_metal_supports_mul_mat_op(...)``):
    run that function's body in the same environment."""
    def inline(value: str, env: Env) -> bool | None:
        m = re.match(r"^(\w+)\s*\((.*)\)$", value)
        if not m or m.group(1) in env.functions:
            return None
        try:
            start, end = function_body(text, m.group(1))
        except Shape:
            return None
        return _verdict(run(text, start, end, env), env, inline)
    return inline


def mul_mat_abort(tree: Tree, backend_name: str, accepted: Iterable[str]) -> Read:
    """Types a backend's supports_op accepts for MUL_MAT but whose kernel dispatch has no case for them: Metal's
    matrix-vector pipeline (``GGML_ABORT("not implemented")``; before ggml-metal-device.cpp, the MUL_MV kernels of
    ggml-metal.m's kernel enum), SYCL's dequantise-to-fp16 table (``ggml_get_to_fp16_sycl`` returns nullptr)."""
    accepted = [t for t in accepted if t not in UNQUANTISED]
    if backend_name == "sycl":
        src = tree.source("ggml/src/ggml-sycl/convert.cpp")
        start, end = function_body(src.clean, "ggml_get_to_fp16_sycl")
        aborts = []
        for t in accepted:
            env = Env({"type": "GGML_TYPE_" + t}, {}, _not_holding)
            out = run(src.clean, start, end, env)
            if out.kind == "abort" or (out.kind == "return" and out.value == "nullptr"):
                aborts.append(t)
        return Read(aborts, src.path, src.lines(start, end))
    if tree.has("ggml/src/ggml-metal/ggml-metal-device.cpp"):
        src = tree.source("ggml/src/ggml-metal/ggml-metal-device.cpp")
        start, end = function_body(src.clean, "ggml_metal_library_get_pipeline_mul_mv")
        aborts = []
        for t in accepted:
            env = Env({"tsrc0": "GGML_TYPE_" + t, "op->src[0]->type": "GGML_TYPE_" + t, "tsrc1": "GGML_TYPE_F32",
                       "op->src[1]->type": "GGML_TYPE_F32", "ne00": "128", "ne11": "1"}, {}, _not_holding)
            if run(src.clean, start, end, env).kind == "abort":
                aborts.append(t)
        return Read(aborts, src.path, src.lines(start, end))
    src = tree.source("ggml/src/ggml-metal/ggml-metal.m")
    found = list(re.finditer(r"GGML_METAL_KERNEL_TYPE_MUL_MV_(\w+?)_F32\b", src.clean))
    if not found:
        raise Shape("ggml-metal.m: no GGML_METAL_KERNEL_TYPE_MUL_MV_*_F32 kernels")
    kernels = {m.group(1) for m in found}
    return Read([t for t in accepted if t not in kernels], src.path, src.lines(found[0].start(), found[0].end()))


def metal_fa_kernels(tree: Tree) -> Read:
    """The K/V types the Metal library has flash-attention kernels for (``kernel_flash_attn_ext_<type>`` host names
    in the shader sources)."""
    paths = ["ggml/src/ggml-metal/ggml-metal.metal"] if tree.has("ggml/src/ggml-metal/ggml-metal.metal") else sorted(
        str(p.relative_to(tree.root)) for p in (tree.root / "ggml/src/ggml-metal/kernels").glob("*.metal"))
    types: set[str] = set()
    where = []
    for path in paths:
        src = tree.source(path)
        hits = list(re.finditer(r"host_name\(\s*\"kernel_flash_attn_ext_(?:vec_)?(f32|f16|bf16|q\w+?|iq\w+?)_"
                                r"(?:h|dk|hk)\d", src.clean))
        types |= {m.group(1).upper() for m in hits}
        if hits:
            where.append(f"{path}{src.lines(hits[0].start(), hits[-1].end())}")
    if not types:
        raise Shape("no kernel_flash_attn_ext_* host names in the Metal shaders")
    return Read(sorted(types), where[0].split(":")[0], "; ".join(where))


# --------------------------------------------------------------------------------------------------------------
# flash attention

def _pairs(kv_types: list[str]) -> list[tuple[str, str]]:
    return [(k, v) for k in kv_types for v in kv_types]


def _fa_env(k: str, v: str, backend: Backend) -> Env:
    env = _op_env("GGML_OP_FLASH_ATTN_EXT", "GGML_TYPE_F32", backend, "GGML_TYPE_" + k, "GGML_TYPE_" + v)
    env.subjects.update({"K->type": "GGML_TYPE_" + k, "V->type": "GGML_TYPE_" + v, "Q->type": "GGML_TYPE_F32",
                         "K->ne[0]": "128", "V->ne[0]": "128", "Q->ne[0]": "128"})
    return env


def _best_kernel_function(text: str) -> str | None:
    m = re.search(r"\b(ggml_\w+_get_best_fattn_kernel)\s*\(\s*const\s+int", text)
    return m.group(1) if m else None


def _type_gates_end(text: str, start: int, end: int) -> int:
    """The end of the gates of a best-kernel function: the statement holding its last ``return
    BEST_FATTN_KERNEL_NONE`` and the blocks around it (what follows only picks among kernels)."""
    last = None
    for m in re.finditer(r"\breturn\s+BEST_FATTN_KERNEL_NONE\s*;", text[start:end]):
        last = start + m.end()
    if last is None:
        raise Shape("no 'return BEST_FATTN_KERNEL_NONE'")
    depth = sum({"{": 1, "}": -1}.get(c, 0) for c in text[start:last])
    stop = last
    while depth > 0 and stop < end:
        depth += {"{": 1, "}": -1}.get(text[stop], 0)
        stop += 1
    return stop


def _fa_best_kernel(tree: Tree, path: str, macros: dict[str, bool], kv: list[str], names: dict[str, bool]
                    ) -> Read:
    src = tree.source(path)
    text = src.configured(macros)
    name = _best_kernel_function(text)
    if name is None:
        raise Shape(f"{path}: no *_get_best_fattn_kernel (before it, supports_op accepts K/V types by head size and "
                    "the kernel dispatch aborts on a pair it has no kernel for: not read)")
    start, end = function_body(text, name)
    stop = _type_gates_end(text, start, end)
    b = Backend(path, (name,), tuple(macros.items()), tuple(names.items()))

    def env_of(param: str, value: str) -> Env:
        return Env({param: value}, dict(names), _not_holding)
    helpers = _helpers(text, ("ggml_cuda_fattn_kv_type_supported", "ggml_sycl_fattn_kv_type_supported"), env_of)
    ok = []
    for k, v in _pairs(kv):
        env = _fa_env(k, v, b)
        env.functions = helpers
        out = run(text, start, stop, env)
        if out.kind == "end" or (out.kind == "return" and out.value != "BEST_FATTN_KERNEL_NONE"):
            ok.append(f"{k.lower()}-{v.lower()}")
        elif not (out.kind == "return" and out.value == "BEST_FATTN_KERNEL_NONE"):
            raise Shape(f"{name} ends with {out.kind} {out.value}")
    return Read(ok, src.path, src.lines(start, stop))


def _cuda_compiled_pairs(tree: Tree) -> Read | None:
    """GGML_CUDA_FA_QUANTS's default (ggml/CMakeLists.txt): the pairs whose vector kernels a default build compiles;
    None when the build has no such option (then GGML_CUDA_FA_ALL_QUANTS decides, read in fattn.cu)."""
    if not tree.has("ggml/CMakeLists.txt"):
        return None
    src = tree.source("ggml/CMakeLists.txt")
    m = re.search(r"set\s*\(\s*GGML_CUDA_FA_QUANTS\s+\"([^\"]*)\"", src.clean)
    if not m:
        return None
    return Read(m.group(1).split(";"), src.path, src.lines(m.start(), m.end()))


def flash_attn(tree: Tree, backend_name: str, kv: list[str]) -> Read:
    """The (K, V) pairs, as "k-v", the backend's flash attention takes (see the module docstring)."""
    if backend_name in ("cuda", "rocm"):
        b = _BACKEND[backend_name]
        read = _fa_best_kernel(tree, "ggml/src/ggml-cuda/fattn.cu", dict(b.macros), kv, {})
        compiled = _cuda_compiled_pairs(tree)
        if compiled is not None:
            native = [p for p in read.value if p in compiled.value or p == "f16-f16"]
            converted = [p for p in read.value if p not in native]
            return Read({"native": native, "converted": converted}, read.file,
                        f"{read.lines}; {compiled.file}{compiled.lines}")
        return Read({"native": read.value, "converted": []}, read.file, read.lines)
    if backend_name == "sycl":
        if not tree.has("ggml/src/ggml-sycl/fattn.cpp"):
            return _fa_supports_op(tree, "sycl", kv)
        common = tree.source("ggml/src/ggml-sycl/common.hpp").clean if tree.has("ggml/src/ggml-sycl/common.hpp") else ""
        macros = {"GGML_SYCL_FA_ALL_QUANTS": False,
                  "SYCL_FLASH_ATTN": bool(re.search(r"^\s*#\s*define\s+SYCL_FLASH_ATTN\b", common, re.M))}
        read = _fa_best_kernel(tree, "ggml/src/ggml-sycl/fattn.cpp", macros, kv,
                               {"g_ggml_sycl_enable_flash_attention": True})
        return Read({"native": read.value, "converted": []}, read.file, read.lines)
    return _fa_supports_op(tree, backend_name, kv)


def _fa_supports_op(tree: Tree, backend_name: str, kv: list[str]) -> Read:
    b = backend_of(tree, backend_name)
    src = tree.source(b.file)
    text = src.configured(dict(b.macros))
    start, end = decider(text, b)

    def env_of(param: str, value: str) -> Env:
        return Env({param: value}, dict(b.names), _not_holding)
    helpers = _helpers(text, ("fa_kv_ok",), env_of)
    inline = _inliner(text, b)
    ok = []
    for k, v in _pairs(kv):
        env = _fa_env(k, v, b)
        env.functions = helpers
        if _verdict(run(text, start, end, env), env, inline):
            ok.append(f"{k.lower()}-{v.lower()}")
    try:
        cs, ce = case_body(text, start, end, "GGML_OP_FLASH_ATTN_EXT")
        lines = src.lines(cs, ce)
    except Shape:
        lines = src.lines(start, end) + " (no FLASH_ATTN_EXT case: the default)"
    value: dict[str, list[str]] = {"native": ok, "converted": []}
    if backend_name == "metal":
        kernels = metal_fa_kernels(tree)
        value = {"native": [p for p in ok if all(t.upper() in kernels.value for t in p.split("-"))], "converted": []}
        value["no_kernel"] = [p for p in ok if p not in value["native"]]
        lines += f"; kernels: {kernels.lines}"
    return Read(value, src.path, lines)
