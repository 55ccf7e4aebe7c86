"""The ``[unified_memory]`` table and ``[[perf]]`` entries of ``matrices/gpus.toml``, validated.

Which products share the host's memory (no GPU/RAM offload, a default wired limit), and each product's memory
bandwidth and dense tensor throughput per number format, with the datasheet it was read from: the inputs of
the speed estimate (qcheck/speed.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qcheck.matrix.schema import Where, check_keys, require_str, type_name

PERF_FORMATS = ("fp16", "bf16", "fp8", "fp4", "int8")


@dataclass(frozen=True)
class GpuPerf:
    """Bandwidth (GB/s, 10^9 bytes) and dense tensor TFLOPS per format of one product, each figure with the page
    it was read from (``sources``: ``bandwidth_gbs`` and one key per ``tflops`` format)."""

    gpu: str
    bandwidth_gbs: float
    tflops: dict[str, float]
    sources: dict[str, str]
    note: str = ""

    @property
    def source(self) -> str:
        """All sources in one line (figure: where)."""
        return "; ".join(f"{k}: {v}" for k, v in self.sources.items())

    def source_of(self, *figures: str) -> str:
        """The sources of the named figures ('bandwidth_gbs', 'bf16' ...), those that exist."""
        return "; ".join(f"{k}: {self.sources[k]}" for k in figures if k in self.sources)


def parse_perf(raw: dict[str, Any], file: str, gpu_ids: set[str], arch_ids: set[str]
               ) -> tuple[dict[str, GpuPerf], frozenset[str]]:
    """(perf by gpu id, ids of unified-memory products and architectures) from the parsed gpus.toml."""
    perf: dict[str, GpuPerf] = {}
    entries = raw.get("perf", [])
    if not isinstance(entries, list):
        Where(file).fail("bad-type", "[[perf]] must be an array of tables")
    for i, entry in enumerate(entries):
        item = _perf_entry(entry, Where(file, f"perf #{i + 1}"), gpu_ids, perf)
        perf[item.gpu] = item
    return perf, _unified(raw.get("unified_memory"), file, gpu_ids, arch_ids)


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _perf_entry(entry: Any, ctx: Where, gpu_ids: set[str], taken: dict[str, GpuPerf]) -> GpuPerf:
    """One ``[[perf]]`` entry: a known product not given before, positive figures, and a source URL for each
    figure."""
    if not isinstance(entry, dict):
        ctx.fail("bad-type", "[[perf]] entries must be tables")
    check_keys(entry, {"gpu", "bandwidth_gbs", "tflops", "sources", "note"}, {"gpu", "bandwidth_gbs", "sources"}, ctx)
    gid = require_str(entry, "gpu", ctx)
    if gid not in gpu_ids:
        ctx.fail("unknown-gpu", f"gpu {gid!r} is not a [[gpu]] id")
    if gid in taken:
        ctx.fail("duplicate-id", f"perf for {gid!r} is given twice")
    bw = entry["bandwidth_gbs"]
    if not _positive(bw):
        ctx.fail("bad-type", f"bandwidth_gbs must be a positive number, not {type_name(bw)}")
    flops = entry.get("tflops", {})
    if not isinstance(flops, dict):
        ctx.fail("bad-type", "tflops must be a table { bf16 = ..., fp8 = ... }")
    for fmt, value in flops.items():
        if fmt not in PERF_FORMATS:
            ctx.fail("unknown-format", f"tflops format {fmt!r} is not one of {', '.join(PERF_FORMATS)}")
        if not _positive(value):
            ctx.fail("bad-type", f"tflops.{fmt} must be a positive number")
    sources = entry["sources"]
    if not isinstance(sources, dict):
        ctx.fail("bad-type", "[perf.sources] must be a table: one source per figure")
    figures = {"bandwidth_gbs", *flops}
    for fig in sorted(figures):
        where = sources.get(fig)
        if not isinstance(where, str) or "http" not in where:
            ctx.fail("missing-source", f"figure {fig!r} has no source URL in [perf.sources]")
    for extra in sorted(set(sources) - figures):
        ctx.fail("unknown-key", f"[perf.sources] names {extra!r}, which is not a figure of this entry")
    note = entry.get("note", "")
    if not isinstance(note, str):
        ctx.fail("bad-type", "note must be a string")
    return GpuPerf(gid, float(bw), {k: float(v) for k, v in flops.items()}, dict(sources), note)


def _unified(table: Any, file: str, gpu_ids: set[str], arch_ids: set[str]) -> frozenset[str]:
    """The ``[unified_memory]`` table: products and architectures whose GPU shares the host's memory."""
    unified: set[str] = set()
    if table is None:
        return frozenset()
    ctx = Where(file, "[unified_memory]")
    if not isinstance(table, dict):
        ctx.fail("bad-type", "[unified_memory] must be a table")
    check_keys(table, {"gpus", "archs", "source", "note"}, {"source"}, ctx)
    require_str(table, "source", ctx)
    for key, known in (("gpus", gpu_ids), ("archs", arch_ids)):
        values = table.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            ctx.fail("bad-type", f"{key} must be a list of ids")
        for v in values:
            if v not in known:
                ctx.fail("unknown-gpu" if key == "gpus" else "unknown-arch", f"{key}: {v!r} is not known")
        unified.update(values)
    return frozenset(unified)


SPEED_KEYS = {"formula", "step_ms", "decode_layer_ms", "prefill_layer_ms", "prefill_tokens", "floor_basis",
              "floor_source", "calibration", "calibration_sources", "note"}


@dataclass(frozen=True)
class SpeedEngine:
    """An engine family's speed floor and calibration (``[[speed_engine]]``): the least time one step takes
    (``step_ms`` + layers x ``decode_layer_ms`` for a decode step, ``prefill_layer_ms`` for a prefill step of
    ``prefill_tokens`` tokens), where that comes from, and how far published runs stayed below the ceiling."""

    formula: str
    step_ms: float
    decode_layer_ms: float
    prefill_layer_ms: float
    prefill_tokens: int
    floor_basis: str
    floor_source: str
    calibration: str
    calibration_sources: tuple[str, ...] = ()

    def decode_floor_ms(self, layers: int) -> float:
        return self.step_ms + max(layers, 1) * self.decode_layer_ms

    def prefill_floor_ms(self, layers: int) -> float:
        return self.step_ms + max(layers, 1) * self.prefill_layer_ms


def parse_speed_engines(raw: dict[str, Any], file: str, formulas: tuple[str, ...]) -> dict[str, SpeedEngine]:
    """``[[speed_engine]]`` entries by formula family, validated (every number finite and not negative)."""
    entries = raw.get("speed_engine", [])
    if not isinstance(entries, list):
        Where(file).fail("bad-type", "[[speed_engine]] must be an array of tables")
    out: dict[str, SpeedEngine] = {}
    for i, entry in enumerate(entries):
        ctx = Where(file, f"speed_engine #{i + 1}")
        if not isinstance(entry, dict):
            ctx.fail("bad-type", "[[speed_engine]] entries must be tables")
        check_keys(entry, SPEED_KEYS, SPEED_KEYS - {"note", "calibration_sources"}, ctx)
        formula = require_str(entry, "formula", ctx)
        if formula not in formulas:
            ctx.fail("bad-value", f"formula {formula!r} is not one of {', '.join(formulas)}")
        if formula in out:
            ctx.fail("duplicate-id", f"speed_engine {formula!r} is given twice")
        numbers = {}
        for key in ("step_ms", "decode_layer_ms", "prefill_layer_ms", "prefill_tokens"):
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                ctx.fail("bad-type", f"{key} must be a finite number >= 0, not {value!r}")
            numbers[key] = value
        if numbers["step_ms"] <= 0 or numbers["prefill_tokens"] < 1 or not isinstance(numbers["prefill_tokens"], int):
            ctx.fail("bad-value", "step_ms must be above 0 and prefill_tokens a whole number >= 1")
        sources = entry.get("calibration_sources", [])
        if not isinstance(sources, list) or not all(isinstance(u, str) and u.startswith("https://") for u in sources):
            ctx.fail("missing-source", "calibration_sources must be a list of https:// URLs")
        out[formula] = SpeedEngine(formula, float(numbers["step_ms"]), float(numbers["decode_layer_ms"]),
                                   float(numbers["prefill_layer_ms"]), int(numbers["prefill_tokens"]),
                                   require_str(entry, "floor_basis", ctx), require_str(entry, "floor_source", ctx),
                                   require_str(entry, "calibration", ctx), tuple(sources))
    return out
