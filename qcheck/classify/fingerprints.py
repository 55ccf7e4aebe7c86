"""Which method a set of tensors is, without any config (docs/research/formats.md §6), and which family reads a config.

The scanners and the ``quant_method`` -> family table come from the format registry (``qcheck.formats``):
scanners run in ``scan_rank`` order, most specific first (a bitsandbytes ``quant_state`` beats a plain U8
weight; ``qweight`` beats ``weight``), and each tensor belongs to at most one quantised weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from qcheck.classify.base import Hints, QLinear
from qcheck.classify.configs import ConfigView
from qcheck.classify.table import TensorTable
from qcheck.formats import REGISTRY
from qcheck.model import TensorInfo


def scan_all(tensors: Mapping[str, TensorInfo], metadata: dict[str, Any], hints: Hints,
             table: TensorTable | None = None) -> list[QLinear]:
    """Every quantised weight the tensor names, dtypes and shapes show (``table``: ``tensors`` as columns,
    built here when not given, so each scanner visits only the tensors its layout could match)."""
    hints = dataclasses.replace(hints, metadata=metadata, table=table or TensorTable(tensors))
    claimed: set[str] = set()
    found: list[QLinear] = []
    for family in REGISTRY.scanners():
        assert family.scanner is not None
        for q in family.scanner(tensors, claimed, hints):
            if any(n in claimed for n in q.tensors):
                continue
            claimed.update(q.tensors)
            found.append(q)
    return found


def config_family(view: ConfigView) -> str | None:
    """The family whose reader understands this checkpoint's config, or None without any config.

    ``hf_quant_config.json`` means ModelOpt whatever config.json says; an MLX ``quantization`` block
    without ``quant_method`` means MLX; a lone quantize_config.json means GPTQ (or AWQ by its keys).
    A ``quant_method`` no registered family reads is ``"unknown-method"``.
    """
    if view.hf_quant is not None:
        return "modelopt"
    method = view.quant_method
    if method:
        family = REGISTRY.family_for(method)
        return family.id if family is not None else "unknown-method"
    if view.mlx is not None:
        return "mlx"
    if view.quant is not None and "config_groups" in view.quant:
        return "compressed-tensors"
    if view.exl3 is not None and str(view.exl3.get("quant_method") or "exl3").lower() == "exl3":
        return "exl3"
    for side in view.side.values():
        if "w_bit" in side or "zero_point" in side or str(side.get("version") or "").lower() in ("gemm", "gemv"):
            return "awq"
        if "bits" in side:
            return "gptq"
    return None
