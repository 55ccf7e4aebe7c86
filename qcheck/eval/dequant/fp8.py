"""FP8 weights: per-tensor, per-channel, per-group, 2-D block (DeepSeek ``weight_scale_inv``, compressed-tensors
``block``, ModelOpt ``FP8_PB_WO``) and MXFP8 (E8M0 scale per 32). Dequant is always ``fp8 value * scale``
broadcast over the scale's granularity, which the scale's shape identifies (docs/research/formats.md §4.1, §4.2)."""

from __future__ import annotations

import math
from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import float32, torch_mod


def fp8_to_float(t: Any, where: str, *, e5m2: bool = False) -> Any:
    """F8_E4M3 / F8_E5M2 tensor (or its raw uint8 bytes) -> float32."""
    torch = torch_mod()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.to(torch.float32)
    if t.dtype in (torch.uint8, torch.int8):
        return t.contiguous().view(torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn).to(torch.float32)
    raise InputError(f"expected an FP8 weight, got {t.dtype}", where=where)


def e8m0_to_float(t: Any) -> Any:
    """E8M0 scale bytes (U8 or float8_e8m0fnu) -> float32 2**(b - 127)."""
    torch = torch_mod()
    b = t.contiguous().view(torch.uint8).to(torch.float32)
    return torch.exp2(b - 127.0)


def dequant_fp8(weight: Any, scale: Any, where: str, *, block: tuple[int, int] | None = None) -> Any:
    """FP8 ``weight`` [..., out, in] times ``scale`` of any granularity -> float32 [..., out, in].

    Scale shapes: one element (per-tensor); [out] or [out, 1] (per-channel); [out, in/g] (per-group, g from
    the shape; U8 scales are MXFP8 E8M0); [ceil(out/bo), ceil(in/bi)] or ModelOpt's [ob, 1, ib, 1] (2-D
    blocks; ``block`` from the config, else 128x128 when it fits, else the exact quotient).
    """
    torch = torch_mod()
    w = fp8_to_float(weight, where)
    if w.ndim < 2:
        raise InputError(f"FP8 weight must be at least 2-D, got shape {tuple(w.shape)}", where=where)
    out_f, in_f = w.shape[-2], w.shape[-1]
    s = e8m0_to_float(scale) if scale.dtype == torch.uint8 else float32(scale)
    if s.numel() == 1:
        return w * s.reshape(())
    lead = tuple(w.shape[:-2])
    if s.ndim == len(lead) + 4 and s.shape[-1] == 1 and s.shape[-3] == 1:  # ModelOpt FP8_PB_WO
        s = s[..., :, 0, :, 0]
    if tuple(s.shape) in ((*lead, out_f), (*lead, out_f, 1)):
        return w * s.reshape(*lead, out_f, 1)
    if s.ndim != len(lead) + 2 or tuple(s.shape[:-2]) != lead:
        raise InputError(f"FP8 scale shape {tuple(scale.shape)} fits no granularity of weight {tuple(w.shape)}",
                         where=where)
    rows, cols = s.shape[-2], s.shape[-1]
    if rows == out_f:  # per-group along the input axis (compressed-tensors group / MXFP8)
        if in_f % cols:
            raise InputError(f"FP8 group scale {tuple(s.shape)} does not divide in_features {in_f}", where=where)
        g = in_f // cols
        return (w.reshape(*lead, out_f, cols, g) * s[..., None]).reshape(w.shape)
    bo, bi = block if block else (_block_len(out_f, rows), _block_len(in_f, cols))
    if bo is None or bi is None or math.ceil(out_f / bo) != rows or math.ceil(in_f / bi) != cols:
        raise InputError(f"FP8 block scale {tuple(s.shape)} does not tile weight {tuple(w.shape)}"
                         + (f" in {bo}x{bi} blocks" if bo and bi else ""), where=where)
    full = s.repeat_interleave(bo, dim=-2).repeat_interleave(bi, dim=-1)[..., :out_f, :in_f]
    return w * full


def _block_len(n: int, blocks: int) -> int | None:
    if blocks <= 0:
        return None
    if math.ceil(n / 128) == blocks:
        return 128
    if n % blocks == 0:
        return n // blocks
    return None
