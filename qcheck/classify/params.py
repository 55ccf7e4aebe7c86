"""The logical parameter count, as a model card states it (docs/design.md ``parameters``).

Packed weights count unpacked (a U8 NVFP4 byte is 2 parameters, an I32 GPTQ word 32/bits); scales,
zero points, ``g_idx``, KV-cache scales and other side tensors are not parameters at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress
from typing import TYPE_CHECKING

from qcheck.classify.base import QLinear
from qcheck.model import TensorInfo

if TYPE_CHECKING:
    from qcheck.classify.table import TensorTable

#: last name component of tensors that describe quantisation, not the model
SIDE_SUFFIXES = frozenset({
    "k_scale", "v_scale", "kv_scale", "q_scale", "prob_scale", "input_scale", "output_scale", "input_global_scale",
    "weight_global_scale", "weight_scale", "weight_scale_inv", "weight_scale_2", "weight_zero_point",
    "weight_g_idx", "weight_shape", "pre_quant_scale", "g_idx", "qzeros", "input_zero_point", "output_zero_point",
    "bias_scale", "bias_zero_point", "SCB", "weight_format", "absmax", "quant_map", "nested_absmax",
    "nested_quant_map", "smooth_scale",
})


#: last name component -> side tensor? (a model repeats a few dozen components over 10^5 tensors; bounded)
_SIDE_LAST: dict[str, bool] = {}


def is_side_tensor(name: str) -> bool:
    """A tensor that stores quantisation state (scales, zeros, indices), never a model parameter."""
    last = name[name.rfind(".") + 1:]
    side = _SIDE_LAST.get(last)
    if side is None:
        # torchao ``{module}._weight_scale``, or a known suffix
        side = (last.startswith("_") and last.endswith(("_scale", "_zero_point"))) or last in SIDE_SUFFIXES
        if len(_SIDE_LAST) < 4096:
            _SIDE_LAST[last] = side
    return side or ".quant_state." in name or name.endswith((":scale", ":zero_point"))


def logical_parameters(tensors: Mapping[str, TensorInfo], qlinears: list[QLinear],
                       table: TensorTable | None = None) -> tuple[int, list[str]]:
    """(logical parameter count, names of quantised weights whose unpacked size was unknown).

    Quantised weights whose logical size the shapes cannot give are counted as stored elements and
    named, so the caller can warn that the count is a lower bound. ``table`` (``tensors`` as columns) saves
    a function call per tensor.
    """
    claimed: set[str] = set()
    total = 0
    unknown: list[str] = []
    for q in qlinears:
        claimed.update(q.tensors)
        if q.logical is not None:
            total += q.logical
        else:
            unknown.append(q.name)
            main = tensors.get(q.tensors[0])
            total += main.numel if main is not None else 0
    if table is not None and table.tensors is tensors:
        if claimed or True in table.side:
            keep = [not s and n not in claimed for s, n in zip(table.side, table.names, strict=True)]
            return total + sum(compress(table.numels, keep)), unknown
        return total + sum(table.numels), unknown
    for name, t in tensors.items():
        if name in claimed or is_side_tensor(name):
            continue
        total += t.numel
    return total, unknown
