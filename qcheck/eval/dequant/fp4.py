"""4-bit floating point weights: NVFP4 (E2M1 + E4M3 scale per 16 + FP32 global) from ModelOpt and
compressed-tensors, and MXFP4 (E2M1 + E8M0 scale per 32) from gpt-oss (``*_blocks``/``*_scales``) and
compressed-tensors. Two E2M1 codes per byte, low nibble first (docs/research/formats.md §4.3-§4.5)."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import as_uint8, expect_shape, float32, torch_mod
from qcheck.eval.dequant.fp8 import e8m0_to_float, fp8_to_float

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def unpack_e2m1(packed: Any, where: str) -> Any:
    """U8 [..., n/2] -> float32 [..., n]: element 2j from the low nibble of byte j, 2j+1 from the high."""
    torch = torch_mod()
    b = as_uint8(packed, where)
    lut = torch.tensor(E2M1, dtype=torch.float32)
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)
    return lut[codes]


def _apply_group_scale(values: Any, scale: Any, group: int, where: str) -> Any:
    out_shape = tuple(values.shape)
    n = out_shape[-1]
    if n % group:
        raise InputError(f"{n} values per row are not a whole number of {group}-element blocks", where=where)
    expect_shape(scale, (*out_shape[:-1], n // group), where, "block scale")
    v = values.reshape(*out_shape[:-1], n // group, group)
    return (v * scale[..., None]).reshape(out_shape)


def dequant_nvfp4(packed: Any, block_scale: Any, global_multiplier: float, where: str) -> Any:
    """NVFP4: e2m1 * E4M3 block scale (per 16) * ``global_multiplier`` (ModelOpt ``weight_scale_2``, or
    1 / compressed-tensors ``weight_global_scale``) -> float32 [..., out, in]."""
    values = unpack_e2m1(packed, where)
    scale = fp8_to_float(block_scale, where) * float(global_multiplier)
    return _apply_group_scale(values, scale, 16, where)


def dequant_mxfp4(packed: Any, scales: Any, where: str) -> Any:
    """MXFP4 with rows packed flat (compressed-tensors ``weight_packed`` [out, in/2], ``weight_scale`` U8
    [out, in/32]): e2m1 * 2**(scale - 127)."""
    values = unpack_e2m1(packed, where)
    return _apply_group_scale(values, e8m0_to_float(scales), 32, where)


def dequant_mxfp4_blocks(blocks: Any, scales: Any, where: str) -> Any:
    """gpt-oss ``*_blocks`` U8 [..., G, 16] and ``*_scales`` U8 [..., G] -> float32 [..., G*32]
    (transformers ``integrations/mxfp4.py`` ``convert_moe_packed_tensors``: exponent = scale - 127,
    low nibble first)."""
    if blocks.ndim < 2 or blocks.shape[-1] != 16:
        raise InputError(f"MXFP4 blocks must end in 16 bytes, got shape {tuple(blocks.shape)}", where=where)
    expect_shape(scales, tuple(blocks.shape[:-1]), where, "MXFP4 scales")
    values = unpack_e2m1(blocks, where)  # [..., G, 32]
    out = values * e8m0_to_float(scales)[..., None]
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def global_value(t: Any, where: str) -> float:
    """A one-element FP32 global scale as a Python float (must be finite and non-zero)."""
    if t.numel() != 1:
        raise InputError(f"global scale must have one element, has shape {tuple(t.shape)}", where=where)
    v = float(float32(t).reshape(()))
    if not (v == v) or v in (0.0, float("inf"), float("-inf")):
        raise InputError(f"global scale is {v}", where=where)
    return v
