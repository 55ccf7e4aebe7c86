"""Wall time, tokens/s and peak resident memory of each phase of ``qcheck eval`` (reference, each candidate).

Why: an evaluation's cost decides whether it runs in CI at all, and memory is the limit that fails first on a
large vocabulary; the report states both so a user sees them without a profiler. Peak RSS is the kernel's
high-water mark (``VmHWM``); on Linux it is reset at the start of each phase (``/proc/self/clear_refs``), so
every phase reports its own peak. Elsewhere it is the process's peak so far (``ru_maxrss``), said so.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any


def peak_rss_bytes() -> int | None:
    """The process's resident-memory high-water mark in bytes (None when the platform does not say)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def reset_peak_rss() -> bool:
    """Start a new high-water mark at the current RSS (Linux); False when the platform cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@dataclass
class Phase:
    """One measured phase: call ``done()`` when it ends; ``to_json()`` for the report."""

    started: float = field(default_factory=time.perf_counter)
    seconds: float | None = None
    tokens: int = 0
    scored_tokens: int = 0
    load_seconds: float | None = None
    peak_rss: int | None = None
    #: the peak while loading (where a simulated candidate holds its dequantised tensors and the model at once)
    load_peak_rss: int | None = None
    per_phase: bool = field(default_factory=reset_peak_rss)

    def loaded(self) -> None:
        """The model is loaded: its time and peak are recorded, and the peak restarts for the scoring."""
        self.load_seconds = time.perf_counter() - self.started
        self.load_peak_rss = peak_rss_bytes()
        self.per_phase = reset_peak_rss() and self.per_phase

    def done(self) -> Phase:
        self.seconds = time.perf_counter() - self.started
        self.peak_rss = peak_rss_bytes()
        return self

    def to_json(self) -> dict[str, Any]:
        compute = None if self.seconds is None else self.seconds - (self.load_seconds or 0.0)
        rate = self.tokens / compute if compute and compute > 0 and self.tokens else None
        scoring = self.peak_rss if self.load_peak_rss is not None and self.per_phase else None
        peaks = [p for p in (self.peak_rss, self.load_peak_rss) if p is not None]
        return {"seconds": self.seconds, "load_seconds": self.load_seconds, "tokens": self.tokens,
                "scored_tokens": self.scored_tokens, "tokens_per_second": rate,
                "peak_rss_bytes": max(peaks) if peaks else None, "scoring_peak_rss_bytes": scoring,
                "peak_rss_scope": "phase" if self.per_phase else "process"}
