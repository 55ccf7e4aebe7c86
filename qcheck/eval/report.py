"""The ``qcheck.eval/1`` record: per-candidate results, the whole run's result, and the pieces of JSON around them.

Why apart from the run: the schema is the public contract (docs/eval.md "JSON"); keeping its assembly in one
place keeps additions to it visible and the orchestration free of formatting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qcheck.eval.cache import CacheInfo
from qcheck.eval.gate import GateOutcome, Thresholds

EVAL_SCHEMA = "qcheck.eval/1"
#: per-token KLD histogram bin edges (log-spaced, nats) for the report plots
HIST_EDGES = [0.0, *[10 ** (e / 4) for e in range(-24, 5)]]


@dataclass
class CandidateResult:
    name: str
    backend: str
    path: str | None
    metrics: dict[str, Any]
    intervals: dict[str, Any]
    gate: GateOutcome
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    distribution: dict[str, Any] = field(default_factory=dict)
    flipped: list[dict[str, Any]] = field(default_factory=list)
    quantization: dict[str, Any] | None = None
    #: simulated candidates: what was done about activation quantisation (None for engine backends)
    activations: str | None = None
    #: wall time, tokens/s and peak RSS of this candidate (``qcheck.eval.perf.Phase.to_json``)
    performance: dict[str, Any] = field(default_factory=dict)
    #: simulated candidates: the engine arithmetic emulated and the effects left out (None: weights alone)
    simulation: dict[str, Any] | None = None
    #: the KV cache the candidate ran with and, when a type was given, the cost split (weights / KV / both)
    kv_cache: dict[str, Any] | None = None
    #: mean KLD, top-1 and PPL ratio per position bucket, with intervals (``CandidateMetrics.by_position``)
    by_position: list[dict[str, Any]] = field(default_factory=list)
    #: the items and tokens it was measured on (``qcheck.eval.coverage.Coverage.to_json``)
    coverage: dict[str, Any] = field(default_factory=dict)
    #: generate items whose output lost end-of-sequence, JSON validity or turned repetitive
    #: (``qcheck.eval.generation.regressions``)
    generation: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend, "path": self.path, "quantization": self.quantization,
                "activations": self.activations, "simulation": self.simulation, "kv_cache": self.kv_cache,
                "by_position": self.by_position,
                "metrics": self.metrics, "intervals": self.intervals, "gate": self.gate.to_json(),
                "per_task": self.per_task, "distribution": self.distribution, "flipped": self.flipped,
                "notes": self.notes, "warnings": self.warnings, "performance": self.performance,
                "coverage": self.coverage, "generation_regressions": self.generation}


@dataclass
class EvalResult:
    """The ``qcheck.eval/1`` record; exit code 0 when every candidate passes its gate, else 1."""

    reference: dict[str, Any]
    tasks: dict[str, Any]
    candidates: list[CandidateResult]
    cache: CacheInfo
    thresholds: Thresholds
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    kind: str = "eval"
    #: ``--noise-floor``: the reference in another dtype, scored like a candidate; not part of the gate
    noise_floor: dict[str, Any] | None = None
    #: the whole run: wall time, the reference pass (None on a cache hit), peak RSS
    performance: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 0 if all(c.gate.passed for c in self.candidates) else 1

    def to_json(self) -> dict[str, Any]:
        return finite_json(self._to_json())

    def _to_json(self) -> dict[str, Any]:
        return {"schema": EVAL_SCHEMA, "reference": self.reference, "tasks": self.tasks,
                "thresholds": self.thresholds.to_json(), "settings": self.settings,
                "cache": self.cache.to_json(), "candidates": [c.to_json() for c in self.candidates],
                "noise_floor": self.noise_floor, "performance": self.performance, "notes": self.notes,
                "exit_code": self.exit_code}


def finite_json(value: Any) -> Any:
    """Strict JSON: NaN and infinities (a broken candidate's metrics) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def histogram(values: Any) -> dict[str, Any]:
    """Per-token KLD counts in the log-spaced ``HIST_EDGES`` bins (negative values counted apart)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    edges = np.array([*HIST_EDGES, math.inf])
    clipped = np.maximum(v, 0.0)
    counts, _ = np.histogram(clipped, bins=edges)
    return {"edges": [float(e) for e in HIST_EDGES], "counts": [int(c) for c in counts],
            "negative": int((v < 0).sum()), "unit": "nats"}


def performance_json(run_phase: Any, ref_phase: Any, results: list[CandidateResult]) -> dict[str, Any]:
    """The run's ``performance``: wall time, the reference pass (None on a cache hit), the largest phase peak."""
    peaks = (run_phase.peak_rss, ref_phase and ref_phase.peak_rss,
             *(c.performance.get("peak_rss_bytes") for c in results))
    return {"wall_seconds": run_phase.seconds,
            "reference": ref_phase.to_json() if ref_phase is not None else None,
            "peak_rss_bytes": max([p for p in peaks if isinstance(p, int)], default=None)}
