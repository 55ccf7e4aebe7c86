"""AutoAWQ GEMM weights: ``qweight`` I32 [in, out/8] packed along the output axis in AWQ's interleaved
nibble order, ``qzeros`` I32 [in/g, out/8] in the same order, ``scales`` [in/g, out]; W = (q - z) * s
(docs/research/formats.md §4.7; AutoAWQ ``WQLinear_GEMM``; transformers/vLLM ``AWQ_REVERSE_ORDER``)."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError
from qcheck.eval.dequant._common import as_int64_bits, expect_shape, float32, torch_mod

#: nibble i of a packed word holds column AWQ_ORDER[i] of its group of 8
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def unpack_awq(packed: Any, where: str) -> Any:
    """int32 [rows, cols/8] -> int64 codes [rows, cols] undoing the AWQ column interleave."""
    torch = torch_mod()
    w = as_int64_bits(packed, where)
    rows, words = w.shape
    out = torch.empty((rows, words, 8), dtype=torch.int64)
    for i, dst in enumerate(AWQ_ORDER):
        out[:, :, dst] = (w >> (4 * i)) & 0xF
    return out.reshape(rows, words * 8)


def dequant_awq(qweight: Any, qzeros: Any, scales: Any, where: str, *, bits: int = 4) -> Any:
    """-> float32 [out, in] (the nn.Linear orientation)."""
    if bits != 4:
        raise InputError(f"AWQ GEMM layout is 4-bit only, config says {bits}", where=where)
    if qweight.ndim != 2 or qzeros.ndim != 2 or scales.ndim != 2:
        raise InputError("AWQ qweight, qzeros and scales must be 2-D", where=where)
    in_f, out_f = qweight.shape[0], qweight.shape[1] * 8
    ngroups = scales.shape[0]
    if ngroups == 0 or in_f % ngroups:
        raise InputError(f"AWQ scales rows {ngroups} do not divide in_features {in_f}", where=where)
    expect_shape(scales, (ngroups, out_f), where, "AWQ scales")
    expect_shape(qzeros, (ngroups, out_f // 8), where, "AWQ qzeros")
    group = in_f // ngroups
    q = unpack_awq(qweight, where)
    z = unpack_awq(qzeros, where).repeat_interleave(group, dim=0)
    s = float32(scales).repeat_interleave(group, dim=0)
    return ((q - z).to(s.dtype) * s).t().contiguous()
