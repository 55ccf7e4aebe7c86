"""One run's network allowance: a total deadline and a total byte count for every exchange with the Hub.

Kept apart from ``qcheck.hub.http`` (stdlib only) so the CLI can start a run without importing the HTTP stack.
"""

from __future__ import annotations

import os
import threading
import time

from qcheck.errors import RemoteError, UsageError


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, not {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{name} must be a finite number, not negative")
    return value


class Budget:
    """One run's allowance for the network: a total deadline and a total byte count, shared by every request
    of every client in the run. A failure that waiting cannot fix (a rate limit asking for more than we wait)
    is remembered, so concurrent requests stop at once instead of each waiting out its own retries."""

    def __init__(self, seconds: float | None = None, max_bytes: int | None = None, started: float | None = None):
        self.seconds = env_float("QCHECK_HUB_DEADLINE", DEFAULT_DEADLINE) if seconds is None else seconds
        self.max_bytes = int(env_float("QCHECK_HUB_MAX_BYTES", DEFAULT_MAX_BYTES)) if max_bytes is None else max_bytes
        self.started = time.monotonic() if started is None else started
        self.used = 0
        self.stop: RemoteError | None = None
        self._lock = threading.Lock()

    def remaining(self) -> float:
        """Seconds left, at most ``threading.TIMEOUT_MAX``: it is passed as a timeout to waits and sockets, which
        refuse larger values (``QCHECK_HUB_DEADLINE=1e12`` is a valid way to say "no deadline")."""
        return min(self.started + self.seconds - time.monotonic(), threading.TIMEOUT_MAX)

    def deadline_error(self, what: str, repo_id: str, endpoint: str) -> RemoteError:
        from qcheck.hub.errors import NetworkError

        return NetworkError(f"gave up on {what} in {repo_id} from {endpoint}: the run's {self.seconds:g} s network "
                            "deadline passed (a slow or stalled server); raise it with QCHECK_HUB_DEADLINE=SECONDS")

    def take(self, nbytes: int, what: str, repo_id: str, endpoint: str) -> None:
        with self._lock:
            self.used += nbytes
            over = self.used > self.max_bytes
        if over:
            raise RemoteError(f"{endpoint} sent more than {self.max_bytes} bytes in this run (reading {what} in "
                              f"{repo_id}); raise the budget with QCHECK_HUB_MAX_BYTES=N")


#: the whole run's network deadline and byte budget (headers only are read: a run needs a few MB, seconds)
DEFAULT_DEADLINE = 300.0
DEFAULT_MAX_BYTES = 2**30
_RUN_STARTED: float | None = None
_RUN_BUDGET: Budget | None = None
_RUN_LOCK = threading.Lock()


def start_run() -> None:
    """Begin a run (the CLI calls it once per command): the deadline counts from here, and every Hub client
    made from now on shares one budget (created at its first use, so commands that never touch the network
    never read its settings)."""
    global _RUN_STARTED, _RUN_BUDGET
    with _RUN_LOCK:
        _RUN_STARTED, _RUN_BUDGET = time.monotonic(), None


def end_run() -> None:
    """End the run: clients made later (library use) get budgets of their own again."""
    global _RUN_STARTED, _RUN_BUDGET
    with _RUN_LOCK:
        _RUN_STARTED, _RUN_BUDGET = None, None


def run_budget() -> Budget:
    """The active run's budget, or a fresh one per client when no run was started (library use)."""
    global _RUN_BUDGET
    with _RUN_LOCK:
        if _RUN_STARTED is None:
            return Budget()
        if _RUN_BUDGET is None:
            _RUN_BUDGET = Budget(started=_RUN_STARTED)
        return _RUN_BUDGET


