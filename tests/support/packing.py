"""Reference quantisers that write the real on-disk layouts of each producer (numpy only, no torch).

qcheck must recognise and dequantise checkpoints exactly as the producers write them, and its tests and
examples must be built from files that look the same. Each ``pack_*`` function takes a float weight
``[out, in]`` (or ``[..., rows, in]`` where noted) and returns ``{tensor name: (array, dtype)}``: ``dtype``
is the safetensors dtype string and ``array`` holds the exact stored bytes (``BF16`` as ``uint16`` bit
patterns, ``F8_E4M3`` as ``uint8`` bit patterns). ``*_config`` functions return the matching config
blocks, ``quantize_model`` applies a scheme to a whole state dict, ``write_checkpoint`` writes a model
directory. The quantisers are round-to-nearest (no calibration); the *layouts* follow the producers'
sources, cited at each packer. Values decode with the ``decode_*``/``to_float32`` helpers here.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Tensors = dict[str, tuple[np.ndarray, str]]

#: numpy storage dtype for each safetensors dtype string this module writes
STORAGE: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E8M0": np.dtype("u1"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

FP8_E4M3_MAX = 448.0
FP4_E2M1_MAX = 6.0
#: FP4 E2M1 value of each 4-bit code (bit 3 = sign), as in transformers integrations/mxfp4.py FP4_VALUES
FP4_E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32
)
#: AutoAWQ GEMM nibble order: nibble i of a packed int32 holds column ``AWQ_ORDER[i]`` of its group of 8
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


# ---------------------------------------------------------------------------------------------------------
# Scalar formats: FP8 E4M3 (FN variant), FP4 E2M1, E8M0, BF16
# ---------------------------------------------------------------------------------------------------------


def _fp8_e4m3_table() -> np.ndarray:
    """Value of every E4M3FN code 0..255: 1 sign, 4 exponent (bias 7), 3 mantissa; S.1111.111 is NaN, no inf."""
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    normal = (1.0 + man / 8.0) * np.exp2(exp - 7.0)
    subnormal = (man / 8.0) * 2.0**-6
    vals = sign * np.where(exp == 0, subnormal, normal)
    vals[(codes & 0x7F) == 0x7F] = np.nan
    return vals.astype(np.float32)


FP8_E4M3_VALUES = _fp8_e4m3_table()


def _encode_by_table(x: np.ndarray, positive_values: np.ndarray, sign_bit: int) -> np.ndarray:
    """Round |x| to the nearest entry of an ascending table of positive codes, ties to the even code.

    Adjacent codes of a sign-magnitude float differ by one in the last mantissa bit, so "even code" is IEEE
    round-half-to-even. Magnitudes above the largest entry saturate to it (producers clamp before casting).
    """
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x)
    top = len(positive_values) - 1
    hi = np.clip(np.searchsorted(positive_values, mag, side="left"), 0, top)
    lo = np.clip(hi - 1, 0, top)
    d_hi = np.abs(positive_values[hi] - mag)
    d_lo = np.abs(mag - positive_values[lo])
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = np.where(pick_lo, lo, hi)
    code = np.where(mag >= positive_values[top], top, code)
    negative = np.signbit(x)
    return (code | np.where(negative, sign_bit, 0)).astype(np.uint8)


def fp8_e4m3_encode(x: np.ndarray) -> np.ndarray:
    """float -> E4M3FN bit patterns (uint8), round-half-to-even, saturating at +-448; NaN -> 0x7F."""
    x = np.asarray(x, dtype=np.float64)
    out = _encode_by_table(np.nan_to_num(x, nan=0.0), FP8_E4M3_VALUES[:127].astype(np.float64), 0x80)
    return np.where(np.isnan(x), np.uint8(0x7F), out).astype(np.uint8)


def fp8_e4m3_decode(bits: np.ndarray) -> np.ndarray:
    """E4M3FN bit patterns (uint8) -> float32."""
    return FP8_E4M3_VALUES[np.asarray(bits, dtype=np.uint8)]


def fp4_e2m1_encode(x: np.ndarray) -> np.ndarray:
    """float -> 4-bit E2M1 codes (uint8 0..15, bit 3 = sign), round-half-to-even, saturating at +-6.

    Same rounding as compressed-tensors' ``_quantize_and_pack_fp4_kernel`` thresholds (0.25->0, 0.75->1,
    1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
    """
    return _encode_by_table(x, FP4_E2M1_VALUES[:8].astype(np.float64), 0x8)


def fp4_e2m1_decode(codes: np.ndarray) -> np.ndarray:
    return FP4_E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF]


def e8m0_decode(bits: np.ndarray) -> np.ndarray:
    """E8M0 (biased power-of-two exponent, bias 127; 255 = NaN) -> float32."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.float64)
    out = np.exp2(b - 127.0)
    out[b == 255] = np.nan
    return out.astype(np.float32)


def bf16_encode(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round-half-to-even like torch."""
    f = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_decode(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode_float(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float values -> the storage array for a float safetensors dtype (F32, F16, BF16, F8_E4M3)."""
    if dtype == "F32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "F16":
        return np.asarray(x, dtype=np.float16)
    if dtype == "BF16":
        return bf16_encode(x)
    if dtype == "F8_E4M3":
        return fp8_e4m3_encode(x)
    if dtype == "F64":
        return np.asarray(x, dtype=np.float64)
    raise ValueError(f"not a float dtype this module encodes: {dtype}")


def to_float32(array: np.ndarray, dtype: str) -> np.ndarray:
    """Decode a stored array of a float (or integer) safetensors dtype to float32."""
    if dtype == "BF16":
        return bf16_decode(array)
    if dtype == "F8_E4M3":
        return fp8_e4m3_decode(array)
    if dtype == "F8_E8M0":
        return e8m0_decode(array)
    return np.asarray(array).astype(np.float32)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 value ``x`` takes once stored as ``dtype`` (what a consumer will read back)."""
    return to_float32(encode_float(x, dtype), dtype)


# ---------------------------------------------------------------------------------------------------------
# Bit packing
# ---------------------------------------------------------------------------------------------------------


def pack_bits_le(values: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned ``bits``-wide codes along the last axis into a dense little-endian bit stream of uint32.

    Element k occupies stream bits [k*bits, (k+1)*bits); words are filled from bit 0. This is the layout of
    compressed-tensors ``pack_to_int32`` (``compressors/pack_quantized/helpers.py``: "element i is extracted
    from global bit position i*num_bits") and of MLX's affine weights (3/5/6-bit values straddle words;
    ``extract_bits`` in mlx's quantized kernels reads byte 0 bits 0-2 as element 0). The last axis is
    zero-padded up to a whole number of words.
    """
    v = np.asarray(values).astype(np.uint64)
    if v.size and (int(v.max()) >> bits):
        raise ValueError(f"a value does not fit in {bits} bits")
    n = v.shape[-1]
    words = math.ceil(n * bits / 32)
    out = np.zeros((*v.shape[:-1], words), dtype=np.uint64)
    for k in range(n):
        start = k * bits
        w, off = divmod(start, 32)
        out[..., w] |= (v[..., k] << np.uint64(off)) & np.uint64(0xFFFFFFFF)
        spill = off + bits - 32
        if spill > 0:
            out[..., w + 1] |= v[..., k] >> np.uint64(bits - spill)
    return out.astype(np.uint32)


def unpack_bits_le(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of ``pack_bits_le``: the first ``count`` codes of each row (int64)."""
    w = np.asarray(words).astype(np.uint32).astype(np.uint64)
    out = np.zeros((*w.shape[:-1], count), dtype=np.int64)
    mask = (1 << bits) - 1
    for k in range(count):
        start = k * bits
        i, off = divmod(start, 32)
        val = w[..., i] >> np.uint64(off)
        spill = off + bits - 32
        if spill > 0:
            val = val | (w[..., i + 1] << np.uint64(32 - off))
        out[..., k] = (val & np.uint64(mask)).astype(np.int64)
    return out


def pack_nibbles_low_first(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte along the last axis: element 2j in the low nibble, 2j+1 in the high nibble.

    NVFP4 (ModelOpt ``weight``, compressed-tensors ``weight_packed``: ``packed = idx_low | (idx_high << 4)``
    in ``compressors/nvfp4/helpers.py``) and gpt-oss MXFP4 blocks (transformers ``integrations/mxfp4.py``
    decodes ``idx_lo = blk & 0x0F`` first) all use this order.
    """
    c = np.asarray(codes, dtype=np.uint8)
    if c.shape[-1] % 2:
        raise ValueError("an even number of 4-bit codes is needed to fill bytes")
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_nibbles_low_first(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty((*p.shape[:-1], p.shape[-1] * 2), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def _as_int32(u32: np.ndarray) -> np.ndarray:
    return np.asarray(u32, dtype=np.uint32).view(np.int32)


def _check_2d(w: np.ndarray, name: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D weight [out, in], got shape {w.shape}")
    return w


def _groups(w: np.ndarray, group: int) -> np.ndarray:
    """[out, in] -> [out, in/group, group] (in must divide)."""
    out, inn = w.shape[-2], w.shape[-1]
    if inn % group:
        raise ValueError(f"in_features {inn} is not a multiple of the group size {group}")
    return w.reshape(*w.shape[:-2], out, inn // group, group)


# ---------------------------------------------------------------------------------------------------------
# FP8
# ---------------------------------------------------------------------------------------------------------


def pack_fp8_compressed_tensors(
    w: np.ndarray,
    prefix: str,
    *,
    strategy: str = "channel",
    block: tuple[int, int] = (128, 128),
    input_scale: float | None = None,
    scale_dtype: str = "BF16",
) -> Tensors:
    """compressed-tensors ``float-quantized`` FP8 E4M3 (llm-compressor FP8 / FP8_DYNAMIC / FP8_BLOCK presets).

    ``weight`` F8_E4M3 [out, in]; ``weight_scale`` [1] (tensor), [out, 1] (channel) or [ceil(out/bo),
    ceil(in/bi)] (block), scale = amax / 448 (``calculate_qparams``: ``max_val_pos / (bit_range / 2)``,
    bit_range of fp8 = 896); ``input_scale`` [1] only for static activations. Dequant: fp8 * scale.
    """
    w = _check_2d(w, prefix)
    out_f, in_f = w.shape
    if strategy == "tensor":
        scale = np.array([np.abs(w).max() / FP8_E4M3_MAX], dtype=np.float32)
        scale = round_to(_nonzero(scale), scale_dtype)
        q = fp8_e4m3_encode(w / scale[0])
    elif strategy == "channel":
        scale = (np.abs(w).max(axis=1, keepdims=True) / FP8_E4M3_MAX).astype(np.float32)
        scale = round_to(_nonzero(scale), scale_dtype)
        q = fp8_e4m3_encode(w / scale)
    elif strategy == "block":
        scale = _block_amax(w, block) / FP8_E4M3_MAX
        scale = round_to(_nonzero(scale), scale_dtype)
        q = fp8_e4m3_encode(w / _expand_blocks(scale, block, w.shape))
    else:
        raise ValueError(f"unknown FP8 strategy {strategy!r}")
    tensors: Tensors = {
        f"{prefix}.weight": (q, "F8_E4M3"),
        f"{prefix}.weight_scale": (encode_float(scale, scale_dtype), scale_dtype),
    }
    if input_scale is not None:
        tensors[f"{prefix}.input_scale"] = (encode_float(np.array([input_scale], np.float32), scale_dtype), scale_dtype)
    del out_f, in_f
    return tensors


def pack_fp8_block_deepseek(w: np.ndarray, prefix: str, *, block: tuple[int, int] = (128, 128)) -> Tensors:
    """DeepSeek-V3 / HF "fine-grained FP8" (``quant_method: fp8``): ``weight`` F8_E4M3 and ``weight_scale_inv``
    F32 [ceil(out/128), ceil(in/128)], the per-block dequantisation multiplier (block amax / 448; partial edge
    blocks use the amax of the elements present, README_WEIGHTS.md "zero-padded to 128"). Dequant: fp8 * s.
    """
    w = _check_2d(w, prefix)
    scale = _nonzero(_block_amax(w, block) / FP8_E4M3_MAX).astype(np.float32)
    q = fp8_e4m3_encode(w / _expand_blocks(scale, block, w.shape))
    return {f"{prefix}.weight": (q, "F8_E4M3"), f"{prefix}.weight_scale_inv": (scale, "F32")}


def pack_fp8_modelopt(w: np.ndarray, prefix: str, *, per_channel: bool = False,
                      input_scale: float | None = None) -> Tensors:
    """NVIDIA ModelOpt FP8 (``quant_algo: FP8``): ``weight`` F8_E4M3, ``weight_scale`` F32 scalar and
    ``input_scale`` F32 scalar (static activations); ``FP8_PER_CHANNEL_PER_TOKEN``: ``weight_scale`` F32 [out],
    no ``input_scale`` (docs/research/formats.md §4.3; vLLM ``ModelOptFp8LinearMethod``). Dequant: fp8 * scale."""
    w = _check_2d(w, prefix)
    if per_channel:
        scale = _nonzero(np.abs(w).max(axis=1) / FP8_E4M3_MAX)
        q = fp8_e4m3_encode(w / scale[:, None])
    else:
        scale = _nonzero(np.array(np.abs(w).max() / FP8_E4M3_MAX, dtype=np.float32))
        q = fp8_e4m3_encode(w / scale)
    tensors: Tensors = {f"{prefix}.weight": (q, "F8_E4M3"), f"{prefix}.weight_scale": (scale, "F32")}
    if input_scale is not None and not per_channel:
        tensors[f"{prefix}.input_scale"] = (np.array(input_scale, dtype=np.float32), "F32")
    return tensors


def pack_mxfp8_compressed_tensors(w: np.ndarray, prefix: str) -> Tensors:
    """compressed-tensors ``mxfp8-quantized``: ``weight`` F8_E4M3 [out, in] and ``weight_scale`` U8 E8M0
    [out, in/32] (exponent via ``mx_scale_exponent`` with E4M3 emax 8). Dequant: fp8 * 2**(scale - 127)."""
    w = _check_2d(w, prefix)
    g = _groups(w, 32)
    exp = mx_scale_exponent(np.abs(g).max(axis=-1), 8)
    q = fp8_e4m3_encode(g / np.exp2(exp)[..., None]).reshape(w.shape)
    return {f"{prefix}.weight": (q, "F8_E4M3"), f"{prefix}.weight_scale": ((exp + 127).astype(np.uint8), "U8")}


def _nonzero(scale: np.ndarray) -> np.ndarray:
    scale = np.asarray(scale, dtype=np.float32)
    return np.where(scale == 0, np.float32(1.0), scale).astype(np.float32)


def _block_amax(w: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    bo, bi = block
    out_f, in_f = w.shape
    ro, ri = math.ceil(out_f / bo), math.ceil(in_f / bi)
    padded = np.zeros((ro * bo, ri * bi), dtype=np.float32)
    padded[:out_f, :in_f] = np.abs(w)
    return padded.reshape(ro, bo, ri, bi).max(axis=(1, 3)).astype(np.float32)


def _expand_blocks(scale: np.ndarray, block: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
    bo, bi = block
    return np.repeat(np.repeat(scale, bo, axis=0), bi, axis=1)[: shape[0], : shape[1]]


# ---------------------------------------------------------------------------------------------------------
# NVFP4 and MXFP4
# ---------------------------------------------------------------------------------------------------------


def _nvfp4_core(w: np.ndarray, global_decode: float) -> tuple[np.ndarray, np.ndarray]:
    """Block scales (E4M3 bits, [out, in/16]) and FP4 codes for a global dequant factor ``global_decode``.

    block scale = (block amax / 6) / global_decode, stored in E4M3; element = x / (scale * global_decode).
    As ModelOpt ``NVFP4QTensor.get_weights_scaling_factor``: an all-zero block gets scale 1.0 and scales are
    clamped to [2**-9, 448] before the E4M3 cast (``_cast_per_block_scale_to_fp8``).
    """
    g = _groups(w, 16)
    block_amax = np.abs(g).max(axis=-1).astype(np.float64)
    per_block = block_amax / FP4_E2M1_MAX / global_decode
    per_block = np.clip(np.where(per_block == 0, 1.0, per_block), 2.0**-9, FP8_E4M3_MAX)
    scale_bits = fp8_e4m3_encode(per_block)
    eff = fp8_e4m3_decode(scale_bits).astype(np.float64) * global_decode
    eff = np.where(eff == 0, 1.0, eff)
    codes = fp4_e2m1_encode(g / eff[..., None]).reshape(w.shape)
    return scale_bits, codes


def pack_nvfp4_modelopt(w: np.ndarray, prefix: str, *, input_amax: float | None = None) -> Tensors:
    """NVIDIA ModelOpt NVFP4: ``weight`` U8 [out, in/2] (two E2M1 per byte, low nibble first),
    ``weight_scale`` F8_E4M3 [out, in/16], ``weight_scale_2`` F32 scalar = amax / (6 * 448), ``input_scale``
    F32 scalar = input amax / (6 * 448) (vLLM ``ModelOptNvFp4LinearMethod`` docstring; ModelOpt
    ``NVFP4QTensor.get_weights_scaling_factor_2``). Dequant: e2m1 * weight_scale * weight_scale_2.
    """
    w = _check_2d(w, prefix)
    ws2 = np.float32(max(float(np.abs(w).max()), 1e-12) / (FP4_E2M1_MAX * FP8_E4M3_MAX))
    scale_bits, codes = _nvfp4_core(w, float(ws2))
    tensors: Tensors = {
        f"{prefix}.weight": (pack_nibbles_low_first(codes), "U8"),
        f"{prefix}.weight_scale": (scale_bits, "F8_E4M3"),
        f"{prefix}.weight_scale_2": (np.array(ws2, dtype=np.float32), "F32"),
    }
    if input_amax is not None:
        s = np.float32(input_amax / (FP4_E2M1_MAX * FP8_E4M3_MAX))
        tensors[f"{prefix}.input_scale"] = (np.array(s, dtype=np.float32), "F32")
    return tensors


def pack_nvfp4_compressed_tensors(w: np.ndarray, prefix: str, *, input_amax: float | None = None) -> Tensors:
    """compressed-tensors ``nvfp4-pack-quantized``: ``weight_packed`` U8 [out, in/2], ``weight_scale``
    F8_E4M3 [out, in/16], ``weight_global_scale`` F32 [1] = 448 * 6 / amax (``generate_gparam``),
    ``input_global_scale`` F32 [1] (static global input scale, same formula on the input amax; the
    ModelOpt->CT converter maps ModelOpt scales to their reciprocal). Dequant: e2m1 * weight_scale /
    weight_global_scale.
    """
    w = _check_2d(w, prefix)
    gscale = np.float32(FP8_E4M3_MAX * FP4_E2M1_MAX / max(float(np.abs(w).max()), 1e-12))
    scale_bits, codes = _nvfp4_core(w, 1.0 / float(gscale))
    tensors: Tensors = {
        f"{prefix}.weight_packed": (pack_nibbles_low_first(codes), "U8"),
        f"{prefix}.weight_scale": (scale_bits, "F8_E4M3"),
        f"{prefix}.weight_global_scale": (np.array([gscale], dtype=np.float32), "F32"),
    }
    if input_amax is not None:
        g_in = np.float32(FP8_E4M3_MAX * FP4_E2M1_MAX / input_amax)
        tensors[f"{prefix}.input_global_scale"] = (np.array([g_in], dtype=np.float32), "F32")
    return tensors


def mx_scale_exponent(amax: np.ndarray, elem_emax: int) -> np.ndarray:
    """Shared power-of-two exponent of MX blocks (OCP MX v1.0: floor(log2 amax) - emax of the element type),
    with compressed-tensors' refinement (``generate_mx_scales`` / ``round_to_power_2``): the block amax is
    first rounded half-up to one mantissa bit, so a block whose amax would round past the element maximum
    takes the next exponent instead of clipping. All-zero blocks get the smallest exponent."""
    a = np.asarray(amax, dtype=np.float64)
    safe = np.where(a > 0, a, 1.0)
    e = np.floor(np.log2(safe))
    e = e + (safe / np.exp2(e) + 0.25 >= 2.0)
    return np.clip(np.where(a > 0, e - elem_emax, -127), -127, 127)


def mxfp4_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OCP MX FP4 on the last axis in blocks of 32: (E8M0 scale bytes [..., n/32], E2M1 codes [..., n]);
    exponent from ``mx_scale_exponent`` (E2M1 emax 2), elements saturate at +-6."""
    w = np.asarray(w, dtype=np.float32)
    g = _groups(w, 32)
    exp = mx_scale_exponent(np.abs(g).max(axis=-1), 2)
    scale_bits = (exp + 127).astype(np.uint8)
    codes = fp4_e2m1_encode(g / np.exp2(exp)[..., None]).reshape(w.shape)
    return scale_bits, codes


def pack_mxfp4_gptoss(w: np.ndarray, name: str) -> Tensors:
    """gpt-oss / transformers ``quant_method: mxfp4``: ``{name}_blocks`` U8 [..., rows, in/32, 16] and
    ``{name}_scales`` U8 [..., rows, in/32] (E8M0, exponent = byte - 127), 32 FP4 values in 16 bytes, low
    nibble first (transformers ``integrations/mxfp4.py`` ``convert_moe_packed_tensors``; openai/gpt-oss
    ``gpt_oss/torch/weights.py``). ``w`` is [..., rows, in] in the on-disk orientation (for gpt-oss experts
    the transpose of the HF parameter: ``gate_up_proj_blocks`` is [E, 2I, H/32, 16] for a [E, H, 2I] param).
    """
    w = np.asarray(w, dtype=np.float32)
    scales, codes = mxfp4_quantize(w)
    blocks = pack_nibbles_low_first(codes).reshape(*w.shape[:-1], w.shape[-1] // 32, 16)
    return {f"{name}_blocks": (blocks, "U8"), f"{name}_scales": (scales, "U8")}


def pack_mxfp4_compressed_tensors(w: np.ndarray, prefix: str) -> Tensors:
    """compressed-tensors ``mxfp4-pack-quantized``: ``weight_packed`` U8 [out, in/2], ``weight_scale`` U8
    [out, in/32] holding E8M0 exponents (``compress_mx_scale``: 127 + log2(scale)); no global scale."""
    w = _check_2d(w, prefix)
    scales, codes = mxfp4_quantize(w)
    return {
        f"{prefix}.weight_packed": (pack_nibbles_low_first(codes), "U8"),
        f"{prefix}.weight_scale": (scales, "U8"),
    }


# ---------------------------------------------------------------------------------------------------------
# Integer weight-only: AWQ, GPTQ, compressed-tensors pack-quantized / int-quantized, MLX affine
# ---------------------------------------------------------------------------------------------------------


def _asym_minmax(g: np.ndarray, maxq: int) -> tuple[np.ndarray, np.ndarray]:
    """AutoAWQ ``pseudo_quantize_tensor`` asymmetric parameters: scale = (max-min)/maxq, zero = -round(min/s)."""
    mx = g.max(axis=-1)
    mn = g.min(axis=-1)
    scale = np.maximum(mx - mn, 1e-5) / maxq
    zero = np.clip(-np.round(mn / scale), 0, maxq)
    return scale.astype(np.float32), zero.astype(np.int64)


def pack_awq_gemm(
    w: np.ndarray, prefix: str, *, group_size: int = 128, scale_dtype: str = "F16"
) -> Tensors:
    """AutoAWQ GEMM (``version: gemm``, 4-bit, zero point): ``qweight`` I32 [in, out/8], ``qzeros`` I32
    [in/g, out/8], ``scales`` F16 [in/g, out]. Packed along the *output* axis; nibble i of each int32 holds
    column ``AWQ_ORDER[i]`` of its group of 8 (AutoAWQ ``WQLinear_GEMM.from_linear``: ``order_map = [0, 2, 4,
    6, 1, 3, 5, 7]``; ``qweight[:, col] |= intweight[:, col*8 + order_map[i]] << (i*4)``). Dequant:
    (q - z) * s.
    """
    w = _check_2d(w, prefix)
    out_f, in_f = w.shape
    if out_f % 8:
        raise ValueError(f"{prefix}: AWQ packs 8 output columns per int32; out_features {out_f} is not a multiple of 8")
    g = _groups(w, group_size)  # [out, ng, g]
    scale, zero = _asym_minmax(g, 15)
    scale = round_to(scale, scale_dtype)
    q = np.clip(np.round(g / scale[..., None]) + zero[..., None], 0, 15).astype(np.int64).reshape(out_f, in_f)
    intweight = q.T  # [in, out]
    zeros = zero.T  # [ng, out]
    return {
        f"{prefix}.qweight": (_awq_pack(intweight), "I32"),
        f"{prefix}.qzeros": (_awq_pack(zeros), "I32"),
        f"{prefix}.scales": (encode_float(scale.T, scale_dtype), scale_dtype),
    }


def _awq_pack(m: np.ndarray) -> np.ndarray:
    rows, cols = m.shape
    packed = np.zeros((rows, cols // 8), dtype=np.uint64)
    for i, src in enumerate(AWQ_ORDER):
        packed |= (m[:, src::8].astype(np.uint64) & 0xF) << np.uint64(4 * i)
    return _as_int32(packed.astype(np.uint32))


def awq_unpack(packed: np.ndarray) -> np.ndarray:
    """Inverse of the AWQ GEMM packing: int32 [rows, cols/8] -> codes [rows, cols] (int64)."""
    p = np.asarray(packed).view(np.uint32).astype(np.int64)
    rows, words = p.shape
    out = np.zeros((rows, words * 8), dtype=np.int64)
    for i, dst in enumerate(AWQ_ORDER):
        out[:, dst::8] = (p >> (4 * i)) & 0xF
    return out


def gptq_act_order_perm(w: np.ndarray, seed: int = 0) -> np.ndarray:
    """A deterministic stand-in for GPTQ's ``argsort(diag(H), descending)`` column order (a seeded shuffle),
    used to build act-order (``desc_act``) checkpoints whose ``g_idx`` is not monotonic."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.asarray(w).shape[1])


def pack_gptq(
    w: np.ndarray,
    prefix: str,
    *,
    bits: int = 4,
    group_size: int = 128,
    sym: bool = True,
    perm: np.ndarray | None = None,
    checkpoint_format: str = "gptq",
    scale_dtype: str = "F16",
) -> Tensors:
    """GPTQ (AutoGPTQ / GPTQModel ``QuantLinear.pack``): ``qweight`` I32 [in*bits/32, out] packed along the
    *input* axis (row i of qweight holds input rows i*32/bits.. low bits first), ``qzeros`` I32
    [ngroups, out*bits/32] packed along the output axis, ``scales`` F16 [ngroups, out], ``g_idx`` I32 [in]
    (group of each input channel). ``perm`` (act-order) is the order GPTQ visits input columns; groups are
    formed in that order, so ``g_idx[perm[k]] = k // group_size`` while qweight stays in the original column
    order (AutoGPTQ ``fasterquant``: ``g_idx = g_idx[invperm]``). ``checkpoint_format="gptq"`` (v1) stores
    zero - 1 (AutoGPTQ ``zeros -= 1`` before packing; readers add 1 back), ``"gptq_v2"`` stores the zero
    itself; AutoGPTQ's readers mask ``(stored + 1) & (2**bits - 1)``. Symmetric zero = 2**(bits-1). ``group_size=-1``: one group over all inputs. Bits 2, 4, 8.
    """
    w = _check_2d(w, prefix)
    if bits not in (2, 3, 4, 8):
        raise ValueError("GPTQ packer supports 2, 3, 4 and 8 bits")
    out_f, in_f = w.shape
    maxq = (1 << bits) - 1
    gs = in_f if group_size == -1 else group_size
    if in_f % gs or (in_f * bits) % 32 or (out_f * bits) % 32:
        raise ValueError(f"{prefix}: shape {w.shape} does not fit group {gs} / whole int32 words of {bits}-bit values")
    order = np.arange(in_f) if perm is None else np.asarray(perm, dtype=np.int64)
    if sorted(order.tolist()) != list(range(in_f)):
        raise ValueError("perm must be a permutation of the input columns")
    ngroups = in_f // gs
    g_idx = np.empty(in_f, dtype=np.int64)
    g_idx[order] = np.arange(in_f) // gs
    scales = np.zeros((ngroups, out_f), dtype=np.float32)
    zeros = np.zeros((ngroups, out_f), dtype=np.int64)
    for gi in range(ngroups):
        cols = w[:, g_idx == gi]  # [out, gs]
        xmin = np.minimum(cols.min(axis=1), 0)
        xmax = np.maximum(cols.max(axis=1), 0)
        if sym:  # GPTQ Quantizer.find_params: xmax = max(|xmin|, xmax); zero = (maxq + 1) / 2
            xmax = np.maximum(np.abs(xmin), xmax)
            xmin = -xmax
        degenerate = (xmin == 0) & (xmax == 0)
        xmin = np.where(degenerate, -1, xmin)
        xmax = np.where(degenerate, 1, xmax)
        s = (xmax - xmin) / maxq
        z = np.full(out_f, (maxq + 1) // 2) if sym else np.round(-xmin / s)
        scales[gi] = s
        zeros[gi] = np.clip(z, 0, maxq).astype(np.int64)
    scales = round_to(scales, scale_dtype)
    s_full = scales[g_idx].T  # [out, in]
    z_full = zeros[g_idx].T
    q = np.clip(np.round(w / s_full) + z_full, 0, maxq).astype(np.int64)  # [out, in]
    # along the input axis as one little-endian bit stream per output column: for 2/4/8 bits this is
    # AutoGPTQ's ``qweight[row] |= intweight[j] << (bits * (j - i))``; its 3-bit branch (10 values, one split
    # across words, 10, one split, 10 per 3 rows) lays out the same stream
    qweight = pack_bits_le(q, bits).T
    # v1: AutoGPTQ packs zero - 1 and its kernels compute ((stored + 1) & maxq), so zero 0 wraps through maxq
    stored = (zeros - 1) & maxq if checkpoint_format == "gptq" else zeros
    qzeros = pack_bits_le(stored, bits)
    return {
        f"{prefix}.qweight": (_as_int32(qweight), "I32"),
        f"{prefix}.qzeros": (_as_int32(qzeros), "I32"),
        f"{prefix}.scales": (encode_float(scales, scale_dtype), scale_dtype),
        f"{prefix}.g_idx": (g_idx.astype(np.int32), "I32"),
    }


def pack_int_compressed_tensors(
    w: np.ndarray,
    prefix: str,
    *,
    bits: int = 4,
    group_size: int | None = 128,
    symmetric: bool = True,
    scale_dtype: str = "BF16",
) -> Tensors:
    """compressed-tensors ``pack-quantized`` (W4A16 / W8A16 presets and asymmetric variants).

    Signed codes q in [-2**(b-1), 2**(b-1)-1] are offset by 2**(b-1) and packed into a dense little-endian
    int32 bit stream along the input axis (``pack_to_int32``): ``weight_packed`` I32 [out, ceil(in*b/32)],
    ``weight_shape`` I64 [2] = (out, in), ``weight_scale`` [out, in/g] (or [out, 1] per channel when
    ``group_size`` is None), and for asymmetric ``weight_zero_point`` (signed, offset and packed along the
    *output* axis: I32 [ceil(out*b/32), ngroups]). Symmetric scale = amax / ((2**b - 1) / 2); asymmetric
    scale = (max - min) / (2**b - 1), zp = clamp(round(qmin - min/scale)) (``calculate_qparams``).
    Dequant: (q - zp) * scale.
    """
    w = _check_2d(w, prefix)
    out_f, in_f = w.shape
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    g = _groups(w, group_size) if group_size else w[:, None, :]
    mn = np.minimum(g.min(axis=-1), 0)
    mx = np.maximum(g.max(axis=-1), 0)
    if symmetric:
        scale = np.maximum(np.abs(mn), np.abs(mx)) / ((qmax - qmin) / 2)
        zp = np.zeros_like(scale, dtype=np.int64)
    else:
        scale = (mx - mn) / (qmax - qmin)
    scale = round_to(_nonzero(scale), scale_dtype)
    if not symmetric:
        zp = np.clip(np.round(qmin - mn / scale), qmin, qmax).astype(np.int64)
    q = np.clip(np.round(g / scale[..., None] + zp[..., None]), qmin, qmax).astype(np.int64).reshape(out_f, in_f)
    tensors: Tensors = {
        f"{prefix}.weight_packed": (_as_int32(pack_bits_le(q - qmin, bits)), "I32"),
        f"{prefix}.weight_scale": (encode_float(scale, scale_dtype), scale_dtype),
        f"{prefix}.weight_shape": (np.array([out_f, in_f], dtype=np.int64), "I64"),
    }
    if not symmetric:
        tensors[f"{prefix}.weight_zero_point"] = (_as_int32(pack_bits_le((zp - qmin).T, bits).T), "I32")
    return tensors


def pack_int8_compressed_tensors(w: np.ndarray, prefix: str, *, scale_dtype: str = "BF16") -> Tensors:
    """compressed-tensors ``int-quantized`` W8A8 INT8 (preset ``W8A8``): ``weight`` I8 [out, in], symmetric
    per-channel ``weight_scale`` [out, 1] = amax / 127.5 (``calculate_qparams``); activations are quantised
    dynamically per token at run time. Dequant: q * scale."""
    w = _check_2d(w, prefix)
    scale = round_to(_nonzero(np.abs(w).max(axis=1, keepdims=True) / 127.5), scale_dtype)
    q = np.clip(np.round(w / scale), -128, 127).astype(np.int8)
    return {
        f"{prefix}.weight": (q, "I8"),
        f"{prefix}.weight_scale": (encode_float(scale, scale_dtype), scale_dtype),
    }


def pack_mlx_affine(
    w: np.ndarray, prefix: str, *, bits: int = 4, group_size: int = 64, dtype: str = "F16"
) -> Tensors:
    """mlx-lm affine quantisation: ``weight`` U32 [out, in*bits/32] (dense little-endian bit stream),
    ``scales`` and ``biases`` [out, in/g] in the model dtype. Parameters follow mlx ``affine_quantize``
    (mlx ``fast.cpp``/``ops.cpp``): the larger-magnitude edge of each group lands exactly on a code
    (scale may be negative), q = clip(round((w - bias) / scale), 0, 2**bits - 1). Dequant: q * scale + bias.
    Bits 2, 3, 4, 5, 6, 8.
    """
    w = _check_2d(w, prefix)
    if bits not in (2, 3, 4, 5, 6, 8):
        raise ValueError("MLX affine bits must be one of 2, 3, 4, 5, 6, 8")
    out_f, in_f = w.shape
    if (in_f * bits) % 32:
        raise ValueError(f"{prefix}: in_features {in_f} * {bits} bits is not a whole number of uint32")
    g = _groups(w, group_size).astype(np.float64)
    n_bins = (1 << bits) - 1
    w_max = g.max(axis=-1)
    w_min = g.min(axis=-1)
    mask = np.abs(w_min) > np.abs(w_max)
    scales = np.maximum((w_max - w_min) / n_bins, 1e-7)
    scales = np.where(mask, scales, -scales)
    edge = np.where(mask, w_min, w_max)
    q0 = np.round(edge / scales)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales)
    biases = np.where(q0 == 0, 0.0, edge)
    scales = round_to(scales, dtype).astype(np.float64)
    biases = round_to(biases, dtype).astype(np.float64)
    q = np.clip(np.round((g - biases[..., None]) / scales[..., None]), 0, n_bins).astype(np.int64)
    return {
        f"{prefix}.weight": (pack_bits_le(q.reshape(out_f, in_f), bits), "U32"),
        f"{prefix}.scales": (encode_float(scales, dtype), dtype),
        f"{prefix}.biases": (encode_float(biases, dtype), dtype),
    }


def pack_mlx_fp(w: np.ndarray, prefix: str, *, mode: str = "mxfp4") -> Tensors:
    """mlx-lm microscaling modes (``mode: mxfp4`` group 32 / ``mxfp8`` group 32): ``weight`` U32 [out,
    in*bits/32] holding E2M1 nibbles (low nibble first) or E4M3 bytes in little-endian order, ``scales`` U8
    [out, in/32] E8M0, no biases (mlx ``dequantize_scale``: ``bf16 bits = s << 7``, i.e. 2**(s - 127))."""
    w = _check_2d(w, prefix)
    if mode == "mxfp4":
        scales, codes = mxfp4_quantize(w)
        packed = pack_bits_le(codes, 4)
    elif mode == "mxfp8":
        g = _groups(w, 32)
        exp = mx_scale_exponent(np.abs(g).max(axis=-1), 8)
        scales = (exp + 127).astype(np.uint8)
        packed = pack_bits_le(fp8_e4m3_encode(g / np.exp2(exp)[..., None]).reshape(w.shape), 8)
    else:
        raise ValueError(f"MLX fp mode must be mxfp4 or mxfp8, not {mode!r}")
    return {f"{prefix}.weight": (packed, "U32"), f"{prefix}.scales": (scales, "U8")}


# ---------------------------------------------------------------------------------------------------------
# Config blocks
# ---------------------------------------------------------------------------------------------------------


def compressed_tensors_config(
    weights: dict[str, Any],
    fmt: str,
    *,
    input_activations: dict[str, Any] | None = None,
    ignore: Iterable[str] = ("lm_head",),
    targets: Iterable[str] = ("Linear",),
) -> dict[str, Any]:
    """``config.json["quantization_config"]`` for compressed-tensors (``QuantizationConfig`` fields)."""
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": list(targets),
                "weights": weights,
                "input_activations": input_activations,
                "output_activations": None,
                "format": fmt,
            }
        },
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
        "sparsity_config": {},
        "version": "0.20.1",
    }


def _qargs(num_bits: int, type_: str, strategy: str, **extra: Any) -> dict[str, Any]:
    args = {
        "num_bits": num_bits,
        "type": type_,
        "symmetric": True,
        "group_size": None,
        "strategy": strategy,
        "block_structure": None,
        "dynamic": False,
        "actorder": None,
        "observer": "minmax",
        "observer_kwargs": {},
    }
    args.update(extra)
    return args


def fp8_compressed_tensors_config(strategy: str, *, static_input: bool,
                                  block: tuple[int, int] = (128, 128)) -> dict[str, Any]:
    """FP8 (static per-tensor activations), FP8_DYNAMIC (channel weights, dynamic per-token) or FP8_BLOCK."""
    extra = {"block_structure": list(block)} if strategy == "block" else {}
    weights = _qargs(8, "float", strategy, **extra)
    if static_input:
        act = _qargs(8, "float", "tensor")
    elif strategy == "block":
        act = _qargs(8, "float", "group", group_size=block[1], dynamic=True, observer=None)
    else:
        act = _qargs(8, "float", "token", dynamic=True, observer=None)
    return compressed_tensors_config(weights, "float-quantized", input_activations=act)


def nvfp4_compressed_tensors_config(*, activations: bool = True) -> dict[str, Any]:
    """NVFP4 (W4A4, dynamic "local" activations with a static global scale) or NVFP4A16."""
    weights = _qargs(4, "float", "tensor_group", group_size=16, scale_dtype="torch.float8_e4m3fn")
    act = (
        _qargs(4, "float", "tensor_group", group_size=16, dynamic="local", scale_dtype="torch.float8_e4m3fn")
        if activations
        else None
    )
    return compressed_tensors_config(weights, "nvfp4-pack-quantized", input_activations=act)


def mxfp4_compressed_tensors_config(*, activations: bool = False) -> dict[str, Any]:
    weights = _qargs(4, "float", "group", group_size=32, scale_dtype="torch.uint8")
    act = _qargs(4, "float", "group", group_size=32, dynamic=True, observer=None) if activations else None
    return compressed_tensors_config(weights, "mxfp4-pack-quantized", input_activations=act)


def int_compressed_tensors_config(bits: int, group_size: int | None, *, symmetric: bool = True) -> dict[str, Any]:
    strategy = "group" if group_size else "channel"
    weights = _qargs(bits, "int", strategy, group_size=group_size, symmetric=symmetric)
    return compressed_tensors_config(weights, "pack-quantized")


def int8_w8a8_compressed_tensors_config() -> dict[str, Any]:
    weights = _qargs(8, "int", "channel")
    act = _qargs(8, "int", "token", dynamic=True, observer=None)
    return compressed_tensors_config(weights, "int-quantized", input_activations=act)


def mxfp8_compressed_tensors_config(*, activations: bool = False) -> dict[str, Any]:
    weights = _qargs(8, "float", "group", group_size=32, scale_dtype="torch.uint8")
    act = _qargs(8, "float", "group", group_size=32, dynamic=True, observer=None) if activations else None
    return compressed_tensors_config(weights, "mxfp8-quantized", input_activations=act)


def modelopt_fp8_configs(*, per_channel: bool = False, exclude: Iterable[str] = ("lm_head",)
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``hf_quant_config.json``, ``config.json["quantization_config"]``) for ModelOpt FP8 exports."""
    algo = "FP8_PER_CHANNEL_PER_TOKEN" if per_channel else "FP8"
    exclude = list(exclude)
    producer = {"name": "modelopt", "version": "0.37.0"}
    hf_quant = {"producer": producer,
                "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None, "exclude_modules": exclude}}
    qc = {"quant_method": "modelopt", "quant_algo": algo, "kv_cache_scheme": None, "ignore": exclude,
          "producer": producer}
    return hf_quant, qc


def fp8_block_config(block: tuple[int, int] = (128, 128)) -> dict[str, Any]:
    """HF ``FineGrainedFP8Config`` / DeepSeek-V3 config.json block."""
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}


def modelopt_nvfp4_configs(exclude: Iterable[str] = ("lm_head",)) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``hf_quant_config.json``, ``config.json["quantization_config"]``) as ModelOpt's unified HF export writes."""
    exclude = list(exclude)
    hf_quant = {
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": 16,
            "exclude_modules": exclude,
        },
    }
    qc = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_scheme": None,
        "group_size": 16,
        "ignore": exclude,
        "producer": {"name": "modelopt", "version": "0.37.0"},
        "config_groups": {
            "group_0": {
                "input_activations": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                "targets": ["Linear"],
            }
        },
    }
    return hf_quant, qc


def mxfp4_gptoss_config(modules_to_not_convert: Iterable[str] = ()) -> dict[str, Any]:
    return {"quant_method": "mxfp4", "modules_to_not_convert": list(modules_to_not_convert)}


def awq_config(group_size: int = 128) -> dict[str, Any]:
    return {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": None}


def gptq_config(bits: int = 4, group_size: int = 128, *, sym: bool = True, desc_act: bool = False,
                checkpoint_format: str = "gptq") -> dict[str, Any]:
    return {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "damp_percent": 0.01,
        "desc_act": desc_act,
        "sym": sym,
        "true_sequential": True,
        "checkpoint_format": checkpoint_format,
        "meta": {"quantizer": ["qcheck.packing"]},
    }


def mlx_config(bits: int = 4, group_size: int = 64, mode: str = "affine") -> dict[str, Any]:
    return {"group_size": group_size, "bits": bits, "mode": mode}


# ---------------------------------------------------------------------------------------------------------
# Whole models
# ---------------------------------------------------------------------------------------------------------

#: scheme name -> human description; the keys are what ``quantize_model`` accepts
SCHEMES: dict[str, str] = {
    "fp8-tensor": "compressed-tensors FP8 W8A8, per-tensor weights, static per-tensor activations",
    "fp8-channel": "compressed-tensors FP8_DYNAMIC, per-channel weights, dynamic per-token activations",
    "fp8-ct-block": "compressed-tensors FP8_BLOCK, 128x128 weight blocks, dynamic per-group-128 activations",
    "fp8-block": "DeepSeek-style fine-grained FP8 (quant_method fp8), 128x128 weight_scale_inv",
    "fp8-modelopt": "ModelOpt FP8, per-tensor weights, static per-tensor activations (hf_quant_config.json)",
    "mxfp8-ct": "compressed-tensors MXFP8A16 (weight-only, E8M0 scale per 32)",
    "nvfp4-modelopt": "ModelOpt NVFP4 W4A4 (hf_quant_config.json)",
    "nvfp4-ct": "compressed-tensors NVFP4 W4A4",
    "nvfp4a16-ct": "compressed-tensors NVFP4A16 (weight-only)",
    "mxfp4-ct": "compressed-tensors MXFP4A16 (weight-only)",
    "awq": "AutoAWQ GEMM 4-bit, zero point",
    "gptq": "GPTQ v1 (AutoGPTQ layout)",
    "int4-ct": "compressed-tensors pack-quantized W4A16",
    "int8-ct": "compressed-tensors pack-quantized W8A16",
    "int8-w8a8-ct": "compressed-tensors int-quantized W8A8 INT8",
    "mlx": "mlx-lm affine",
    "mlx-mxfp4": "mlx-lm mxfp4 mode (E2M1, E8M0 scale per 32)",
}


def default_targets(name: str, shape: tuple[int, ...]) -> bool:
    """Quantise 2-D ``*proj.weight`` Linear weights (attention and MLP); keep embeddings, norms and lm_head."""
    return len(shape) == 2 and name.endswith("proj.weight")


@dataclass
class QuantizedCheckpoint:
    """A packed state dict plus the config it needs: ``quantization_config`` goes into config.json,
    ``config_updates`` are other config.json keys (MLX's ``quantization``), ``side_files`` are extra JSON
    files (``hf_quant_config.json``, ``quantize_config.json``)."""

    tensors: Tensors
    quantization_config: dict[str, Any] | None
    config_updates: dict[str, Any] = field(default_factory=dict)
    side_files: dict[str, Any] = field(default_factory=dict)
    quantized: list[str] = field(default_factory=list)  # module prefixes that were quantised
    metadata: dict[str, str] = field(default_factory=lambda: {"format": "pt"})


def quantize_model(
    state_dict: Mapping[str, np.ndarray],
    scheme: str,
    *,
    dtype: str = "BF16",
    targets: Callable[[str, tuple[int, ...]], bool] = default_targets,
    bits: int | None = None,
    group_size: int | None = None,
    act_order: bool = False,
    sym: bool = True,
    input_amax: float = 4.0,
) -> QuantizedCheckpoint:
    """Quantise every targeted weight of a float state dict with ``scheme`` (a key of ``SCHEMES``); other
    tensors are stored in ``dtype``. Returns tensors and config blocks ready for ``write_checkpoint``.
    ``input_amax`` is the assumed activation range for static input scales (FP8 per-tensor, NVFP4)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    tensors: Tensors = {}
    quantized: list[str] = []
    qc: dict[str, Any] | None
    updates: dict[str, Any] = {}
    side: dict[str, Any] = {}
    metadata = {"format": "pt"}
    pack: Callable[[np.ndarray, str], Tensors]
    if scheme == "fp8-tensor":
        s_in = np.float32(input_amax / FP8_E4M3_MAX)
        pack = lambda w, p: pack_fp8_compressed_tensors(w, p, strategy="tensor", input_scale=float(s_in))  # noqa: E731
        qc = fp8_compressed_tensors_config("tensor", static_input=True)
    elif scheme == "fp8-channel":
        pack = lambda w, p: pack_fp8_compressed_tensors(w, p, strategy="channel")  # noqa: E731
        qc = fp8_compressed_tensors_config("channel", static_input=False)
    elif scheme == "fp8-ct-block":
        pack = lambda w, p: pack_fp8_compressed_tensors(w, p, strategy="block")  # noqa: E731
        qc = fp8_compressed_tensors_config("block", static_input=False)
    elif scheme == "fp8-block":
        pack = pack_fp8_block_deepseek
        qc = fp8_block_config()
    elif scheme == "fp8-modelopt":
        s_in = float(np.float32(input_amax / FP8_E4M3_MAX))
        pack = lambda w, p: pack_fp8_modelopt(w, p, input_scale=s_in)  # noqa: E731
        hf_quant, qc = modelopt_fp8_configs()
        side["hf_quant_config.json"] = hf_quant
    elif scheme == "mxfp8-ct":
        pack = pack_mxfp8_compressed_tensors
        qc = mxfp8_compressed_tensors_config()
    elif scheme == "nvfp4-modelopt":
        pack = lambda w, p: pack_nvfp4_modelopt(w, p, input_amax=input_amax)  # noqa: E731
        hf_quant, qc = modelopt_nvfp4_configs()
        side["hf_quant_config.json"] = hf_quant
    elif scheme == "nvfp4-ct":
        pack = lambda w, p: pack_nvfp4_compressed_tensors(w, p, input_amax=input_amax)  # noqa: E731
        qc = nvfp4_compressed_tensors_config(activations=True)
    elif scheme == "nvfp4a16-ct":
        pack = pack_nvfp4_compressed_tensors
        qc = nvfp4_compressed_tensors_config(activations=False)
    elif scheme == "mxfp4-ct":
        pack = pack_mxfp4_compressed_tensors
        qc = mxfp4_compressed_tensors_config()
    elif scheme == "awq":
        gs = group_size or 128
        pack = lambda w, p: pack_awq_gemm(w, p, group_size=gs)  # noqa: E731
        qc = awq_config(gs)
    elif scheme == "gptq":
        gs = group_size or 128
        b = bits or 4
        pack = lambda w, p: pack_gptq(  # noqa: E731
            w, p, bits=b, group_size=gs, sym=sym, perm=gptq_act_order_perm(w, seed=len(p)) if act_order else None
        )
        qc = gptq_config(b, gs, sym=sym, desc_act=act_order)
        side["quantize_config.json"] = {k: v for k, v in qc.items() if k != "quant_method"}
    elif scheme in ("int4-ct", "int8-ct"):
        b = 4 if scheme == "int4-ct" else 8
        gs = group_size if group_size is not None else 128
        pack = lambda w, p: pack_int_compressed_tensors(  # noqa: E731
            w, p, bits=b, group_size=gs if gs > 0 else None, symmetric=sym
        )
        qc = int_compressed_tensors_config(b, gs if gs > 0 else None, symmetric=sym)
    elif scheme == "int8-w8a8-ct":
        pack = pack_int8_compressed_tensors
        qc = int8_w8a8_compressed_tensors_config()
    elif scheme == "mlx-mxfp4":
        pack = lambda w, p: pack_mlx_fp(w, p, mode="mxfp4")  # noqa: E731
        qc = None
        updates["quantization"] = mlx_config(4, 32, "mxfp4")
        updates["quantization_config"] = mlx_config(4, 32, "mxfp4")
        metadata = {"format": "mlx"}
    else:  # mlx
        b = bits or 4
        gs = group_size or 64
        mdtype = dtype if dtype in ("F16", "BF16", "F32") else "F16"
        pack = lambda w, p: pack_mlx_affine(w, p, bits=b, group_size=gs, dtype=mdtype)  # noqa: E731
        qc = None
        updates["quantization"] = mlx_config(b, gs)
        updates["quantization_config"] = mlx_config(b, gs)
        metadata = {"format": "mlx"}
    for name, value in state_dict.items():
        arr = np.asarray(value, dtype=np.float32)
        if targets(name, arr.shape):
            prefix = name[: -len(".weight")]
            tensors.update(pack(arr, prefix))
            quantized.append(prefix)
        else:
            tensors[name] = (encode_float(arr, dtype), dtype)
    return QuantizedCheckpoint(tensors, qc, updates, side, quantized, metadata)


def save_safetensors(path: str | Path, tensors: Mapping[str, tuple[np.ndarray, str]],
                     metadata: Mapping[str, str] | None = None) -> Path:
    """Write a safetensors file byte for byte (header JSON padded to 8 bytes, then each tensor's raw
    little-endian bytes), for dtypes numpy cannot name (BF16, F8_E4M3, ...)."""
    path = Path(path)
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr, dtype = tensors[name]
        if dtype not in STORAGE:
            raise ValueError(f"{name}: unsupported dtype {dtype}")
        data = np.ascontiguousarray(np.asarray(arr), dtype=STORAGE[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)
    return path


def write_checkpoint(out_dir: str | Path, config: Mapping[str, Any], qc: QuantizedCheckpoint,
                     extra_files: Mapping[str, bytes | str] | None = None) -> Path:
    """Write ``model.safetensors``, ``config.json`` (with ``quantization_config`` and other updates) and the
    side files of a quantised checkpoint into ``out_dir``; ``extra_files`` (e.g. tokenizer files) are
    copied verbatim."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(config)
    if qc.quantization_config is not None:
        cfg["quantization_config"] = qc.quantization_config
    cfg.update(qc.config_updates)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name, content in qc.side_files.items():
        (out / name).write_text(json.dumps(content, indent=2) + "\n")
    for name, content in (extra_files or {}).items():
        target = out / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    save_safetensors(out / "model.safetensors", qc.tensors, qc.metadata)
    return out
