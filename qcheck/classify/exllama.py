"""ExLlamaV2 (EXL2) and ExLlamaV3 (EXL3) checkpoints (docs/research/formats.md §4.10).

EXL2: ``q_weight`` I32 ``[rows, out]`` + ``q_invperm [in]`` + ``q_scale``/``q_scale_max``/``q_groups``;
bits vary per layer and are ``32 * rows / in``. EXL3: ``trellis`` I16 ``[in/16, out/16, 16*K]``, K bits
per weight (``K = trellis.shape[-1] // 16``), plus ``suh``/``svh`` (or ``su``/``sv``), ``mcg``, ``mul1``.
"""

from __future__ import annotations

from collections.abc import Mapping

from qcheck.classify.base import Draft, Hints, QLinear, prod
from qcheck.classify.configs import ConfigView, excluded_modules, first
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo

EXL2_PARTS = ("q_weight", "q_invperm", "q_perm", "q_scale", "q_scale_max", "q_groups")
EXL3_PARTS = ("trellis", "suh", "svh", "su", "sv", "mcg", "mul1")


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """EXL2 ``q_weight`` groups and EXL3 ``trellis`` tensors, bits per layer from their shapes."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, lasts=("q_weight", "trellis")):
        t = tensors[name]
        if name in claimed:
            continue
        if name.endswith(".q_weight") and len(t.shape) == 2:
            prefix = name[: -len(".q_weight")]
            inv = tensors.get(f"{prefix}.q_invperm") or tensors.get(f"{prefix}.q_perm")
            if inv is None or not inv.shape or inv.shape[0] <= 0:
                continue
            in_dim, out_dim = inv.shape[0], t.shape[1]
            bits = 32 * t.shape[0] / in_dim
            out.append(QLinear(name=prefix, method="exl2", layout="exl2",
                               tensors=[n for p in EXL2_PARTS if (n := f"{prefix}.{p}") in tensors],
                               logical=in_dim * out_dim, bits=round(bits, 4), granularity="group",
                               weight_dtype=None, producer="exllamav2"))
        elif name.endswith(".trellis") and len(t.shape) == 3 and t.shape[-1] % 16 == 0:
            prefix = name[: -len(".trellis")]
            k = t.shape[-1] // 16
            out.append(QLinear(name=prefix, method="exl3", layout="exl3",
                               tensors=[n for p in EXL3_PARTS if (n := f"{prefix}.{p}") in tensors],
                               logical=prod(t.shape[:2]) * 256, bits=k, granularity=None,
                               weight_dtype=None, producer="exllamav3"))
    return out


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """``quant_method: exl2|exl3`` (or EXL3's quantization_config.json): target bpw and head bits."""
    q = view.quant if (view.quant_method or "") in ("exl2", "exl3") else None
    q = q or view.exl3 or {}
    draft.expected_method = family
    draft.producer = "exllamav2" if family == "exl2" else "exllamav3"
    draft.config_method = str(q.get("quant_method") or family)
    draft.excluded = excluded_modules(q)
    bits = first(q, "bits")
    head = first(q, "head_bits")
    parts = []
    if isinstance(bits, (int, float)):
        parts.append(f"target {bits} bpw")
    if isinstance(head, (int, float)):
        parts.append(f"head {head} bits")
    ver = first(q, "version")
    if ver:
        parts.append(f"version {ver}")
    draft.format = ", ".join(parts) or family
