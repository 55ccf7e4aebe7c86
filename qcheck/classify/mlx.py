"""MLX (mlx-lm) quantisation: U32 ``weight`` + ``scales`` (+ ``biases`` for affine), config block
``quantization: {group_size, bits, mode}`` with per-module overrides and no ``quant_method``
(docs/research/formats.md §4.9). transformers' ``metal`` method uses the same packing with ``qbiases``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, prod
from qcheck.classify.configs import ConfigView, as_int, excluded_modules
from qcheck.classify.dtypes import container_word, int_word
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo

#: mode -> (default group, default bits, weight dtype word, scale dtype word)
MODES: dict[str, tuple[int, int, str | None, str | None]] = {
    "affine": (64, 4, None, None),
    "mxfp4": (32, 4, "fp4_e2m1", "e8m0"),
    "nvfp4": (16, 4, "fp4_e2m1", "float8_e4m3"),
    "mxfp8": (32, 8, "float8_e4m3", "e8m0"),
}


def hints_from(block: dict[str, Any] | None) -> Hints:
    """Default bits/group plus per-module overrides from an MLX ``quantization`` block."""
    if not block:
        return Hints()
    mode = str(block.get("mode") or "affine").lower()
    dg, db = MODES.get(mode, MODES["affine"])[:2]
    hints = Hints(bits=as_int(block.get("bits")) or db, group_size=as_int(block.get("group_size")) or dg)
    for key, value in block.items():
        if isinstance(value, dict) and ("bits" in value or "group_size" in value):
            hints.overrides[key] = (as_int(value.get("bits")), as_int(value.get("group_size")))
    return hints


def view_hints(view: ConfigView) -> Hints:
    """The scanner's bits/group from the ``quantization`` block (or a ``quant_method: mlx`` config)."""
    return hints_from(view.mlx or view.quant)


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """U32 ``weight`` + ``scales`` pairs; bits = 32 * packed cols / (scale cols * group)."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, dtypes=("U32",)):
        t = tensors[name]
        if name in claimed or not name.endswith(".weight") or t.dtype.upper() != "U32" or len(t.shape) < 2:
            continue
        prefix = name[: -len(".weight")]
        scales = tensors.get(f"{prefix}.scales")
        if scales is None or len(scales.shape) < 2 or scales.shape[-1] <= 0:
            continue
        biases = tensors.get(f"{prefix}.biases") or tensors.get(f"{prefix}.qbiases")
        wcols, scols = t.shape[-1], scales.shape[-1]
        bits, group = hints.for_module(prefix)
        if bits is None and group is None:
            group = 64
        if bits is None and group:
            b = 32 * wcols / (scols * group)
            bits = int(b) if b.is_integer() else None
        in_dim = wcols * 32 // bits if bits else None
        if in_dim is not None:
            g = exact_div(in_dim, scols)
            group = g if g is not None else group
        rows = prod(t.shape[:-1])
        metal = biases is not None and biases.name.endswith("qbiases")
        q = QLinear(name=prefix, method="mlx", layout="mlx-metal" if metal else "mlx", tensors=[name, scales.name],
                    logical=rows * in_dim if in_dim else None, bits=bits, group_size=group, granularity="group",
                    weight_dtype=int_word(bits) if biases is not None else None,
                    scale_dtype=container_word(scales.dtype), zero_point=biases is not None,
                    producer="transformers (metal)" if metal else "mlx-lm")
        if biases is not None:
            q.tensors.append(biases.name)
        out.append(q)
    return out


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """The MLX ``quantization`` block (mode, bits, group, per-module overrides) or transformers ``metal``."""
    block = view.mlx
    method = view.quant_method or ""
    metal = block is None and method == "metal"
    if block is None and method in ("metal", "mlx"):
        block = view.quant  # the bits/group of a ``quant_method: mlx`` config, as the scanner's hints take them
    draft.producer = "transformers (metal)" if metal else "mlx-lm"
    draft.config_method = "metal" if metal else "mlx"
    block = block or {}
    mode = str(block.get("mode") or "affine").lower()
    dg, db, wdt, sdt = MODES.get(mode, MODES["affine"])
    draft.expected_method = "mlx"
    draft.expected_bits = as_int(block.get("bits")) or db
    draft.expected_group = as_int(block.get("group_size")) or dg
    draft.format = mode
    draft.scale_granularity = "group"
    draft.zero_point = mode == "affine"
    if wdt:
        draft.weight_dtype = wdt
        for q in draft.qlinears:
            if q.method == "mlx":
                q.weight_dtype, q.scale_dtype, q.zero_point = wdt, sdt, False
    excluded = [k for k, v in block.items() if v is False]  # MLX-only: ``"module": false`` overrides
    listed = set(excluded)
    draft.excluded = excluded + [e for e in excluded_modules(view.quant) if e not in listed]
    if any(isinstance(v, dict) for v in block.values()):
        bits = sorted({as_int(v.get("bits")) or draft.expected_bits or 0 for v in block.values() if isinstance(v, dict)}
                      | {draft.expected_bits or 0})
        if len(bits) > 1:
            draft.warn("MLX mixed quantisation: per-module overrides use " + "/".join(map(str, bits)) + " bits")
