"""Shared helpers for the dequantisers: dtype-safe integer views and little-endian bit unpacking in torch."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError


def torch_mod() -> Any:
    import torch

    return torch


def as_int64_bits(t: Any, where: str) -> Any:
    """Reinterpret a 32-bit (I32/U32) tensor as its unsigned bit patterns in int64 (torch has few uint32 ops)."""
    torch = torch_mod()
    if t.dtype in (torch.int32, getattr(torch, "uint32", torch.int32)):
        return t.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    raise InputError(f"expected a 32-bit integer tensor, got {t.dtype}", where=where)


def as_uint8(t: Any, where: str) -> Any:
    """The raw bytes of an 8-bit tensor (U8, I8, F8_E4M3 or E8M0), as int64 values 0..255."""
    torch = torch_mod()
    if t.element_size() != 1:
        raise InputError(f"expected an 8-bit tensor, got {t.dtype}", where=where)
    return t.contiguous().view(torch.uint8).to(torch.int64)


def unpack_le(words: Any, bits: int, count: int, where: str) -> Any:
    """Codes 0..2**bits-1 from a dense little-endian bit stream of uint32 words along the last axis.

    Element k sits at stream bits [k*bits, (k+1)*bits) (compressed-tensors ``pack_to_int32``, MLX affine,
    GPTQ's qweight/qzeros for 2/4/8 bits); values may straddle two words for 3/5/6/7 bits.
    """
    torch = torch_mod()
    w = as_int64_bits(words, where)
    need = (count * bits + 31) // 32
    if w.shape[-1] < need:
        raise InputError(f"packed tensor has {w.shape[-1]} words per row, {count} {bits}-bit values need {need}",
                         where=where)
    mask = (1 << bits) - 1
    if 32 % bits == 0:
        per = 32 // bits
        shifts = torch.arange(per, dtype=torch.int64) * bits
        vals = (w[..., :need, None] >> shifts) & mask
        return vals.reshape(*w.shape[:-1], need * per)[..., :count]
    pos = torch.arange(count, dtype=torch.int64) * bits
    idx = pos // 32
    off = pos % 32
    padded = torch.nn.functional.pad(w, (0, 1))
    lo = padded[..., idx] >> off
    hi = padded[..., idx + 1] << (32 - off)
    return (lo | hi) & mask


def expect_shape(t: Any, shape: tuple[int, ...], where: str, what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise InputError(f"{what} has shape {tuple(t.shape)}, the layout needs {tuple(shape)}", where=where)


def float32(t: Any) -> Any:
    """Any float tensor (bf16, f16, f8, f32) -> float32."""
    torch = torch_mod()
    return t.to(torch.float32)
