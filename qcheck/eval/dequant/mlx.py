"""mlx-lm weights. Affine: ``weight`` U32 [out, in*bits/32] (dense little-endian bit stream), ``scales`` and
``biases`` [out, in/group]; W = q * scale + bias (mlx ``affine_dequantize``; docs/research/formats.md §4.9). Microscaling
modes ``mxfp4`` / ``mxfp8``: the U32 words hold E2M1 nibbles / E4M3 bytes in little-endian order and
``scales`` are U8 E8M0 per 32 (mlx ``dequantize_scale``), no biases."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import expect_shape, float32, torch_mod, unpack_le


def dequant_mlx_affine(weight: Any, scales: Any, biases: Any, where: str, *, bits: int, group_size: int) -> Any:
    """-> float32 [out, in]."""
    if bits not in (2, 3, 4, 5, 6, 8):
        raise InputError(f"MLX affine bits must be 2, 3, 4, 5, 6 or 8, config says {bits}", where=where)
    if weight.ndim != 2 or group_size <= 0:
        raise InputError(f"MLX weight must be 2-D with a positive group size, got {tuple(weight.shape)}, "
                         f"group {group_size}", where=where)
    out_f = weight.shape[0]
    if (weight.shape[1] * 32) % bits:
        raise InputError(f"{weight.shape[1]} uint32 words are not a whole number of {bits}-bit values",
                         where=where)
    in_f = weight.shape[1] * 32 // bits
    if in_f % group_size:
        raise InputError(f"in_features {in_f} is not a multiple of the group size {group_size}", where=where)
    ngroups = in_f // group_size
    expect_shape(scales, (out_f, ngroups), where, "MLX scales")
    expect_shape(biases, (out_f, ngroups), where, "MLX biases")
    q = unpack_le(weight, bits, in_f, where).reshape(out_f, ngroups, group_size)
    w = q.to(float32(scales).dtype) * float32(scales)[..., None] + float32(biases)[..., None]
    return w.reshape(out_f, in_f)


def dequant_mlx_fp(weight: Any, scales: Any, where: str, *, mode: str, group_size: int = 32) -> Any:
    """MLX ``mxfp4`` / ``mxfp8`` -> float32 [out, in]. ``nvfp4`` (whose scale semantics differ) is refused."""
    from qcheck.eval.dequant.fp4 import unpack_e2m1
    from qcheck.eval.dequant.fp8 import e8m0_to_float, fp8_to_float

    torch = torch_mod()
    if mode not in ("mxfp4", "mxfp8"):
        raise InputError(f"MLX quantization mode {mode!r} is not simulated (affine, mxfp4 and mxfp8 are)",
                         where=where)
    if group_size != 32 or weight.ndim != 2:
        raise InputError(f"MLX {mode} needs 2-D weights and group size 32 (got {group_size})", where=where)
    raw = weight.contiguous().view(torch.int32).view(torch.uint8)  # little-endian words -> bytes
    values = unpack_e2m1(raw, where) if mode == "mxfp4" else fp8_to_float(raw, where)
    out_f, in_f = values.shape
    expect_shape(scales, (out_f, in_f // 32), where, f"MLX {mode} scales")
    if scales.dtype != torch.uint8:
        raise InputError(f"MLX {mode} scales must be U8 (E8M0), got {scales.dtype}", where=where)
    return (values.reshape(out_f, in_f // 32, 32) * e8m0_to_float(scales)[..., None]).reshape(out_f, in_f)
