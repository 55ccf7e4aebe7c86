"""The logical parameter count, as a model card states it (docs/design.md ``parameters``).

Packed weights count unpacked (a U8 NVFP4 byte is 2 parameters, an I32 GPTQ word 32/bits); scales,
zero points, ``g_idx``, KV-cache scales and other side tensors are not parameters at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress
from typing import TYPE_CHECKING

from qcheck.classify.base import QLinear
from qcheck.classify.side import SIDE_SUFFIXES, is_side_tensor
from qcheck.model import TensorInfo

if TYPE_CHECKING:
    from qcheck.classify.table import TensorTable

__all__ = ["SIDE_SUFFIXES", "is_side_tensor", "logical_parameters"]

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
