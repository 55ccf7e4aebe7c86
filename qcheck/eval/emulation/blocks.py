"""Number formats as engines store and compute them: quantise-then-dequantise on torch tensors, along the last
dimension, bit for bit the values the engine's kernels then use.

ggml block types follow llama.cpp b11312 (vendored in llama-cpp-python 0.3.36): the reference quantisers in
``ggml/src/ggml-quants.c`` (``quantize_row_q4_0_ref`` :113-148, ``q4_1`` :150-185, ``q5_0`` :187-229, ``q5_1``
:231-274, ``q8_K`` :2768-2805, ``iq4_nl`` :4937-5084 with ``ntry = -1``) and, for the activation blocks the CPU
quantises its dot-product operands into, the x86 ``quantize_row_q8_0`` / ``quantize_row_q8_1`` of
``ggml/src/ggml-cpu/arch/x86/quants.c`` :302-455 (scale ``amax / 127`` stored as fp16, codes rounded to nearest
even with the unrounded ``127 / amax``). Every block scale is stored as fp16 except Q8_K's float32 one. The values
are checked against llama.cpp's own quantisers (libggml through ctypes) in tests/test_eval_kv_cache.py.

FP8 (``e4m3`` / ``e5m2``) is torch's conversion, which saturates e4m3 at +-448 as CUDA's ``__NV_SATFINITE`` does.
"""

from __future__ import annotations

from typing import Any

#: values per block of each ggml type this module reproduces
BLOCK_SIZES = {"q8_0": 32, "q8_1": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32, "iq4_nl": 32, "q8_K": 256}
#: ggml's IQ4_NL code book (ggml/src/ggml-common.h:1120-1122)
IQ4_NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
#: plain float storage types and their torch dtype names
FLOAT_TYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch() -> Any:
    import torch

    return torch


def _blocked(x: Any, size: int) -> Any:
    """``x`` as float32 blocks ``[..., n / size, size]``; the last dimension must be a whole number of blocks."""
    n = x.shape[-1]
    if n % size:
        raise ValueError(f"a row of {n} values is not a whole number of {size}-value blocks")
    return x.float().reshape(*x.shape[:-1], n // size, size)


def _fp16(t: Any) -> Any:
    torch = _torch()
    return t.to(torch.float16).to(torch.float32)


def _signed_absmax(v: Any) -> Any:
    """The value with the largest magnitude in each block (the first on ties), keeping its sign."""
    idx = v.abs().argmax(dim=-1, keepdim=True)
    return v.gather(-1, idx)


def _inverse(d: Any) -> Any:
    torch = _torch()
    return torch.where(d != 0, torch.ones_like(d) / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))


def q8_0(x: Any) -> Any:
    """Q8_0 (and Q8_1, whose values are the same): 32 values, ``d = amax / 127`` (fp16), codes round-to-even."""
    torch = _torch()
    v = _blocked(x, 32)
    amax = v.abs().amax(dim=-1, keepdim=True)
    d = amax / 127.0
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / torch.where(amax > 0, amax, torch.ones_like(amax)),
                      torch.zeros_like(amax))
    q = torch.round(v * inv)
    return (q * _fp16(d)).reshape(x.shape)


def q8_K(x: Any) -> Any:
    """Q8_K: 256 values, ``iscale = -127 / max`` (max: the signed largest-magnitude value), float32 ``d = 1 / iscale``."""
    torch = _torch()
    v = _blocked(x, 256)
    mx = _signed_absmax(v)
    nonzero = mx != 0
    iscale = torch.where(nonzero, torch.full_like(mx, -127.0) / torch.where(nonzero, mx, torch.ones_like(mx)),
                         torch.zeros_like(mx))
    q = torch.round(iscale * v).clamp(max=127.0)
    d = torch.where(nonzero, torch.ones_like(iscale) / torch.where(nonzero, iscale, torch.ones_like(iscale)),
                    torch.zeros_like(iscale))
    return (q * d).reshape(x.shape)


def _symmetric(x: Any, levels: int) -> Any:
    """Q4_0 (levels 16) / Q5_0 (32): ``d = max / -(levels / 2)``, codes ``min(levels - 1, trunc(x / d + levels / 2 +
    0.5))``, values ``(code - levels / 2) * fp16(d)``."""
    torch = _torch()
    v = _blocked(x, 32)
    half = levels // 2
    d = _signed_absmax(v) / float(-half)
    q = torch.floor(v * _inverse(d) + (half + 0.5)).clamp(0, levels - 1)
    return ((q - half) * _fp16(d)).reshape(x.shape)


def _affine(x: Any, levels: int) -> Any:
    """Q4_1 (levels 16) / Q5_1 (32): ``d = (max - min) / (levels - 1)``, codes ``trunc((x - min) / d + 0.5)``,
    values ``code * fp16(d) + fp16(min)``."""
    v = _blocked(x, 32)
    lo = v.amin(dim=-1, keepdim=True)
    hi = v.amax(dim=-1, keepdim=True)
    d = (hi - lo) / float(levels - 1)
    q = (((v - lo) * _inverse(d)) + 0.5).floor().clamp(0, levels - 1)
    return (q * _fp16(d) + _fp16(lo)).reshape(x.shape)


def q4_0(x: Any) -> Any:
    return _symmetric(x, 16)


def q5_0(x: Any) -> Any:
    return _symmetric(x, 32)


def q4_1(x: Any) -> Any:
    return _affine(x, 16)


def q5_1(x: Any) -> Any:
    return _affine(x, 32)


def iq4_nl(x: Any) -> Any:
    """IQ4_NL as ``quantize_row_iq4_nl_ref`` stores a row (no importance weights, ``ntry = -1``): codes from
    ``d0 = max / -127``, then the weighted least-squares scale ``d = Σ w q x / Σ w q²`` with ``w = x²`` (fp16)."""
    torch = _torch()
    v = _blocked(x, 32)
    values = torch.tensor(IQ4_NL_VALUES, dtype=torch.float32, device=v.device)
    mx = _signed_absmax(v)
    d0 = mx / -127.0
    scaled = v * _inverse(d0)
    # best_index_int8: the nearest code value, the upper one on a tie
    mids = (values[1:] + values[:-1]) / 2
    idx = torch.bucketize(scaled.contiguous(), mids, right=True)
    q = values[idx]
    w = v * v
    # left to right in float32, as the C loop adds (a pairwise sum can round d to the other fp16 neighbour)
    sumqx = (w * q * v).cumsum(dim=-1)[..., -1:]
    sumq2 = (w * q * q).cumsum(dim=-1)[..., -1:]
    d = torch.where(sumq2 > 0, sumqx / torch.where(sumq2 > 0, sumq2, torch.ones_like(sumq2)), torch.zeros_like(sumq2))
    d = torch.where(v.abs().amax(dim=-1, keepdim=True) < 1e-15, torch.zeros_like(d), d)
    return (q * _fp16(d)).reshape(x.shape)


_BLOCK_FUNCS = {"q8_0": q8_0, "q8_1": q8_0, "q8_K": q8_K, "q4_0": q4_0, "q4_1": q4_1, "q5_0": q5_0, "q5_1": q5_1,
                "iq4_nl": iq4_nl}


def round_to(x: Any, kind: str) -> Any:
    """``x`` (float32 result) as stored in ``kind``: a ggml block type or a plain float type (``f32`` is a no-op)."""
    torch = _torch()
    if kind in FLOAT_TYPES:
        if kind == "f32":
            return x.float()
        return x.to(getattr(torch, FLOAT_TYPES[kind])).float()
    func = _BLOCK_FUNCS.get(kind)
    if func is None:
        raise ValueError(f"no emulation of storage type {kind!r}")
    return func(x)


def fp8(x: Any, kind: str = "e4m3", scale: float = 1.0) -> Any:
    """FP8 with a per-tensor scale: ``fp8(x / scale) * scale`` (e4m3 saturates at +-448, e5m2 overflows to inf)."""
    torch = _torch()
    dtype = torch.float8_e4m3fn if kind == "e4m3" else torch.float8_e5m2
    return (x.float() / scale).to(dtype).float() * scale


def hadamard(n: int, device: Any = None) -> Any:
    """The orthonormal Walsh-Hadamard matrix of order ``n`` (a power of two), Sylvester's construction, as llama.cpp's
    ``ggml_gen_hadamard`` (src/llama-kv-cache.cpp:21-58) builds it: symmetric, its own inverse."""
    torch = _torch()
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard order {n} is not a power of two")
    h = torch.ones((1, 1), dtype=torch.float32, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], dim=1), torch.cat([h, -h], dim=1)], dim=0)
    return h / float(n) ** 0.5


def rotate(x: Any, h: Any) -> Any:
    """``x``'s last dimension rotated by ``h`` in consecutive chunks of ``h``'s order (llama.cpp's
    ``llama_mul_mat_hadamard``, src/llama-impl.h:57-77)."""
    n = h.shape[0]
    shape = x.shape
    return (x.float().reshape(-1, n) @ h).reshape(shape)
