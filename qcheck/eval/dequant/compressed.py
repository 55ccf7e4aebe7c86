"""compressed-tensors integer weights: ``pack-quantized`` (``weight_packed`` I32 dense little-endian bit
stream of offset-binary codes, ``weight_shape``, ``weight_scale``, optional ``weight_zero_point`` packed
along the output axis and ``weight_g_idx``) and ``int-quantized`` (``weight`` I8 + ``weight_scale``).
W = (q - zp) * scale per group (``compressors/pack_quantized``; docs/research/formats.md §4.2)."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import expect_shape, float32, torch_mod, unpack_le


def _scale_columns(scale: Any, out_f: int, in_f: int, g_idx: Any | None, where: str) -> Any:
    """Column index into ``scale`` for every input column ([in] int64), from the scale shape / g_idx."""
    torch = torch_mod()
    ncols = scale.shape[-1] if scale.ndim == 2 else 1
    if g_idx is not None:
        expect_shape(g_idx, (in_f,), where, "weight_g_idx")
        gi = g_idx.to(torch.int64)
        if in_f and (int(gi.min()) < 0 or int(gi.max()) >= ncols):
            raise InputError(f"weight_g_idx values outside [0, {ncols})", where=where)
        return gi
    if in_f % ncols:
        raise InputError(f"scale has {ncols} groups, which do not divide in_features {in_f}", where=where)
    return torch.arange(in_f, dtype=torch.int64) // (in_f // ncols)


def _scales_2d(scale: Any, out_f: int, where: str) -> Any:
    s = float32(scale)
    if s.numel() == 1:
        return s.reshape(1, 1).expand(out_f, 1)
    if s.ndim == 1 and s.shape[0] == out_f:
        return s.reshape(out_f, 1)
    if s.ndim == 2 and s.shape[0] == out_f:
        return s
    raise InputError(f"weight_scale shape {tuple(scale.shape)} does not fit {out_f} output rows", where=where)


def dequant_pack_quantized(weight_packed: Any, weight_scale: Any, weight_shape: Any, where: str, *, bits: int,
                           weight_zero_point: Any | None = None, weight_g_idx: Any | None = None) -> Any:
    """-> float32 [out, in]."""
    torch = torch_mod()
    if not 1 <= bits <= 8:
        raise InputError(f"pack-quantized num_bits must be 1..8, config says {bits}", where=where)
    if weight_shape.numel() != 2:
        raise InputError(f"weight_shape must hold 2 values, has shape {tuple(weight_shape.shape)}", where=where)
    out_f, in_f = (int(v) for v in weight_shape.reshape(-1).tolist())
    if out_f <= 0 or in_f <= 0:
        raise InputError(f"weight_shape {(out_f, in_f)} is not a valid matrix shape", where=where)
    expect_shape(weight_packed, (out_f, (in_f * bits + 31) // 32), where, "weight_packed")
    offset = 1 << (bits - 1)
    q = unpack_le(weight_packed, bits, in_f, where) - offset
    s = _scales_2d(weight_scale, out_f, where)
    cols = _scale_columns(s, out_f, in_f, weight_g_idx, where)
    if weight_zero_point is not None:
        ngroups = s.shape[1]
        zp_words = (out_f * bits + 31) // 32
        if weight_zero_point.dtype == torch.int32 and tuple(weight_zero_point.shape) == (zp_words, ngroups):
            zp = unpack_le(weight_zero_point.t().contiguous(), bits, out_f, where).t() - offset
        else:
            zp = _zp_plain(weight_zero_point, out_f, ngroups, where)
        q = q - zp[:, cols]
    return q.to(torch.float32) * s[:, cols]


def _zp_plain(zp: Any, out_f: int, ngroups: int, where: str) -> Any:
    torch = torch_mod()
    z = zp.to(torch.int64)
    if z.numel() == 1:
        return z.reshape(1, 1).expand(out_f, ngroups)
    if tuple(z.shape) in ((out_f,), (out_f, 1)) and ngroups == 1:
        return z.reshape(out_f, 1)
    if tuple(z.shape) == (out_f, ngroups):
        return z
    raise InputError(f"weight_zero_point shape {tuple(zp.shape)} does not fit {out_f}x{ngroups} groups",
                     where=where)


def dequant_int_quantized(weight: Any, weight_scale: Any, where: str, *, weight_zero_point: Any | None = None,
                          weight_g_idx: Any | None = None) -> Any:
    """``int-quantized`` / ``naive-quantized``: I8 weight [out, in] -> float32 [out, in]."""
    torch = torch_mod()
    if weight.dtype not in (torch.int8, torch.uint8) or weight.ndim != 2:
        raise InputError(f"int-quantized weight must be a 2-D I8 tensor, got {weight.dtype} "
                         f"{tuple(weight.shape)}", where=where)
    out_f, in_f = weight.shape
    q = weight.to(torch.int64)
    s = _scales_2d(weight_scale, out_f, where)
    cols = _scale_columns(s, out_f, in_f, weight_g_idx, where)
    if weight_zero_point is not None:
        q = q - _zp_plain(weight_zero_point, out_f, s.shape[1], where)[:, cols]
    return q.to(torch.float32) * s[:, cols]
