"""Progress of a long ``qcheck eval`` on stderr: a rich bar on a terminal, periodic lines elsewhere.

In CI stderr is a pipe or a log file, where a bar is noise and silence looks like a hang (a 5-candidate run
once said nothing for 9 minutes). There one line is printed when a phase starts, then at most every
``QCHECK_PROGRESS_INTERVAL`` seconds (default 30) with the count, the elapsed time and an ETA, and one when
it ends.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

DEFAULT_INTERVAL = 30.0


def _interval() -> float:
    try:
        value = float(os.environ.get("QCHECK_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value >= 0 else DEFAULT_INTERVAL


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class LineProgress:
    """Periodic plain lines (no terminal needed): start, every interval, end."""

    def __init__(self, stream: TextIO | None = None, interval: float | None = None, clock: Any = time.monotonic):
        self.stream = stream or sys.stderr
        self.interval = _interval() if interval is None else interval
        self.clock = clock
        self.label = ""
        self.total = 0
        self.done = 0
        self.started = 0.0
        self.last = 0.0
        self.active = False

    def _print(self, text: str) -> None:
        self.stream.write(f"qcheck eval: {text}\n")
        self.stream.flush()

    def start(self, label: str, total: int) -> None:
        self.stop()
        self.label, self.total, self.done, self.active = label, total, 0, True
        self.started = self.last = self.clock()
        self._print(f"{label}: 0/{total} started")

    def advance(self, n: int = 1) -> None:
        if not self.active:
            return
        self.done += n
        now = self.clock()
        if now - self.last >= self.interval and self.done < self.total:
            self.last = now
            elapsed = now - self.started
            pct = 100 * self.done / self.total if self.total else 100.0
            eta = elapsed * (self.total - self.done) / self.done if self.done else None
            self._print(f"{self.label}: {self.done}/{self.total} ({pct:.0f}%), {duration(elapsed)} elapsed"
                        + (f", about {duration(eta)} left" if eta is not None else ""))

    def stop(self) -> None:
        if self.active:
            self.active = False
            self._print(f"{self.label}: {self.done}/{self.total} done in {duration(self.clock() - self.started)}")
