"""GPTQ weights (AutoGPTQ / GPTQModel layout): ``qweight`` I32 [in*bits/32, out] packed along the input
axis as a little-endian bit stream (3-bit values straddle words, AutoGPTQ's 3-bit branch), ``qzeros`` I32
[ngroups, out*bits/32], ``scales`` [ngroups, out], ``g_idx`` I32 [in] (act-order may make it non-monotonic). v1 (``checkpoint_format: gptq``) stores zero - 1: the value used is
((stored + 1) & (2**bits - 1)) as AutoGPTQ's kernels compute it; ``gptq_v2`` stores the zero itself.
W[:, i] = (q[i] - z[g_idx[i]]) * s[g_idx[i]] (docs/research/formats.md §4.6)."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import expect_shape, float32, torch_mod, unpack_le


def dequant_gptq(qweight: Any, qzeros: Any, scales: Any, g_idx: Any | None, where: str, *, bits: int = 4,
                 checkpoint_format: str = "gptq") -> Any:
    """-> float32 [out, in] (the nn.Linear orientation)."""
    torch = torch_mod()
    if bits not in (2, 3, 4, 8):
        raise InputError(f"GPTQ with {bits} bits is not supported (2, 3, 4, 8 are)", where=where)
    if qweight.ndim != 2 or qzeros.ndim != 2 or scales.ndim != 2:
        raise InputError("GPTQ qweight, qzeros and scales must be 2-D", where=where)
    if (qweight.shape[0] * 32) % bits or (scales.shape[1] * bits) % 32:
        raise InputError(f"GPTQ qweight {tuple(qweight.shape)} / scales {tuple(scales.shape)} do not hold whole "
                         f"{bits}-bit packs", where=where)
    in_f = qweight.shape[0] * 32 // bits
    out_f = qweight.shape[1]
    ngroups = scales.shape[0]
    expect_shape(scales, (ngroups, out_f), where, "GPTQ scales")
    expect_shape(qzeros, (ngroups, out_f * bits // 32), where, "GPTQ qzeros")
    if ngroups == 0:
        raise InputError("GPTQ scales have no rows", where=where)
    if g_idx is None:
        if in_f % ngroups:
            raise InputError(f"{ngroups} groups do not divide in_features {in_f}", where=where)
        gidx = torch.arange(in_f, dtype=torch.int64) // (in_f // ngroups)
    else:
        expect_shape(g_idx, (in_f,), where, "GPTQ g_idx")
        gidx = g_idx.to(torch.int64)
        if in_f and (int(gidx.min()) < 0 or int(gidx.max()) >= ngroups):
            raise InputError(f"g_idx values must lie in [0, {ngroups}), found [{int(gidx.min())}, "
                             f"{int(gidx.max())}]", where=where)
    q = unpack_le(qweight.t().contiguous(), bits, in_f, where)  # [out, in]
    z = unpack_le(qzeros, bits, out_f, where)  # [ngroups, out]
    if checkpoint_format == "gptq":
        z = (z + 1) & ((1 << bits) - 1)
    elif checkpoint_format != "gptq_v2":
        raise InputError(f"unknown GPTQ checkpoint_format {checkpoint_format!r}", where=where)
    s = float32(scales)
    return (q - z[gidx].t()).to(torch.float32) * s[gidx].t()
