"""GPU memory as the driver reports it: a ``[[gpu]]`` entry's ``capacity`` and the ``[capacity]`` rules, validated.

A product's marketed size is not what an engine can use. ``cudaMemGetInfo`` (what PyTorch, vLLM, SGLang's KV pool
and llama.cpp's ``--fit`` read) reports less than the datasheet (an "80 GB" H100 is 79.19 GiB to CUDA), ``nvidia-smi``
(what SGLang's ``mem_fraction_static`` heuristic reads) reports a figure in between, and data-centre GDDR6 parts
with ECC on (A10, L4, L40S, T4, A40) lose a sixteenth of their memory to it. So each product may carry

    capacity = { runtime_total_gib = 79.19, smi_total_mib = 81559, source = "..." }

and where one figure is missing the ``[capacity]`` rules estimate it, always on the side that cannot make a model
"fit" that does not (the runtime total from ``nvidia-smi`` minus the largest gap seen; from the datasheet, the
smallest ratio seen). The memory estimate says which figure it used (qcheck.memory.device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qcheck.matrix.vocab import Where, check_keys, require_str, type_name

CAPACITY_KEYS = {"runtime_total_gib", "smi_total_mib", "source", "note"}
RULE_KEYS = {"smi_gap_min_mib", "smi_gap_max_mib", "datasheet_ratio", "source", "note"}


@dataclass(frozen=True)
class GpuCapacity:
    """What a product's driver reports: the runtime total (``cudaMemGetInfo``/``torch.cuda.mem_get_info`` total,
    HIP's on AMD) in GiB and the management tool's total (``nvidia-smi``/``amd-smi`` ``memory.total``) in MiB,
    either may be unknown, with where they were read."""

    runtime_total_gib: float | None
    smi_total_mib: float | None
    source: str


@dataclass(frozen=True)
class CapacityRules:
    """How a missing figure is estimated (``[capacity]`` in gpus.toml), always on the side that cannot make a model
    fit that does not: the runtime total is the ``nvidia-smi`` total minus ``smi_gap_max_mib`` (the largest gap
    measured), or the datasheet size times ``datasheet_ratio`` (the smallest ratio measured on a part without ECC
    reservation); the ``nvidia-smi`` total is the runtime total plus ``smi_gap_min_mib`` (the smallest gap: a
    smaller total gives SGLang's heuristic a smaller ``mem_fraction_static``)."""

    smi_gap_min_mib: float = 346.0
    smi_gap_max_mib: float = 768.0
    datasheet_ratio: float = 0.98
    source: str = ""


def _positive(value: Any, key: str, ctx: Where) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        ctx.fail("bad-type", f"{key} must be a positive number, not {type_name(value)} {value!r}")
    return float(value)


def parse_capacity(raw: Any, ctx: Where) -> GpuCapacity:
    """A ``[[gpu]]`` entry's ``capacity = { ... }``: at least one figure, a source naming where it was read."""
    if not isinstance(raw, dict):
        ctx.fail("bad-type", f"capacity must be a table, not {type_name(raw)}")
    check_keys(raw, CAPACITY_KEYS, {"source"}, ctx)
    runtime = raw.get("runtime_total_gib")
    smi = raw.get("smi_total_mib")
    if runtime is None and smi is None:
        ctx.fail("missing-key", "capacity needs runtime_total_gib and/or smi_total_mib")
    source = require_str(raw, "source", ctx)
    if "http" not in source:
        ctx.fail("missing-source", "capacity.source must name the page the figures were read from (a URL)")
    return GpuCapacity(_positive(runtime, "runtime_total_gib", ctx) if runtime is not None else None,
                       _positive(smi, "smi_total_mib", ctx) if smi is not None else None, source)


def parse_rules(raw: Any, file: str) -> CapacityRules:
    """The top-level ``[capacity]`` table (absent: the built-in figures, which the shipped file repeats)."""
    if raw is None:
        return CapacityRules()
    ctx = Where(file, "[capacity]")
    if not isinstance(raw, dict):
        ctx.fail("bad-type", "[capacity] must be a table")
    check_keys(raw, RULE_KEYS, RULE_KEYS - {"note"}, ctx)
    ratio = _positive(raw["datasheet_ratio"], "datasheet_ratio", ctx)
    if ratio > 1:
        ctx.fail("bad-value", f"datasheet_ratio {ratio} must not exceed 1")
    low = _positive(raw["smi_gap_min_mib"], "smi_gap_min_mib", ctx)
    high = _positive(raw["smi_gap_max_mib"], "smi_gap_max_mib", ctx)
    if low > high:
        ctx.fail("bad-value", f"smi_gap_min_mib {low} is above smi_gap_max_mib {high}")
    return CapacityRules(low, high, ratio, require_str(raw, "source", ctx))
