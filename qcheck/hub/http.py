"""Bounded HTTP to the Hub: ``qcheck.net`` (httpx2) with the Hub's headers, its run budget and its messages.

Every exchange of a run draws on one ``Budget``: a total deadline (``QCHECK_HUB_DEADLINE``; a server that drips
one byte every few seconds cannot keep a CI job alive: per-read timeouts never fire on it, the deadline does, in
name resolution, connect, TLS, the status line, the headers or the body) and a total byte count
(``QCHECK_HUB_MAX_BYTES``). 429/5xx/timeouts are retried with exponential backoff (``Retry-After`` and the
Hub's ``RateLimit`` honoured, up to ``QCHECK_HUB_MAX_WAIT``); every body is streamed and cut at the length asked
for; each call is counted per file so tests and ``bench/`` can show that only headers were fetched.

Headers are qcheck's own: ``Authorization: Bearer`` with the token ``huggingface_hub.get_token()`` finds
(``HF_TOKEN``, the ``hf auth login`` file) and a ``qcheck/VERSION`` user agent. huggingface_hub's session and
``build_hf_headers`` are not used: the latter may fetch the Hub's agent-harness registry (an unbounded body,
outside the run's budget), and the session would bring a second retry and timeout policy.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from qcheck.budget import Budget, env_float, run_budget
from qcheck.errors import RemoteError
from qcheck.hub.errors import StatusReply, http_error, network_error, offline_error, redact
from qcheck.net import Call, Client, NetError, Response, Settings, Watch, retry_after

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def hub_endpoint() -> str:
    """``HF_ENDPOINT`` read now (huggingface_hub reads it once, at import), else huggingface_hub's default."""
    env = os.environ.get("HF_ENDPOINT")
    if env:
        return env.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` read now, with huggingface_hub's truthy values."""
    raw = os.environ.get("HF_HUB_OFFLINE")
    if raw is None:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    return raw.strip().upper() in {"1", "ON", "YES", "TRUE"}


@dataclass
class FileStats:
    requests: int = 0
    bytes: int = 0
    failed: int = 0  # attempts that ended in a retryable status or a transport error, over the whole run


def user_agent() -> str:
    """``qcheck/VERSION; python/VERSION``."""
    import platform

    from qcheck import __version__

    return f"qcheck/{__version__}; python/{platform.python_version()}"


@dataclass
class HubClient:
    """One run's connection to the Hub: endpoint, auth headers, retry policy and per-file counters."""

    endpoint: str = field(default_factory=hub_endpoint)
    token: str | None = None
    timeout: float = field(default_factory=lambda: env_float("QCHECK_HUB_TIMEOUT", 10.0))
    retries: int = field(default_factory=lambda: int(env_float("QCHECK_HUB_RETRIES", 3)))
    backoff: float = field(default_factory=lambda: env_float("QCHECK_HUB_BACKOFF", 0.5))
    max_wait: float = field(default_factory=lambda: env_float("QCHECK_HUB_MAX_WAIT", 10.0))
    stats: dict[str, FileStats] = field(default_factory=dict)
    budget: Budget = field(default_factory=run_budget)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._announced: set[tuple[str, int]] = set()
        if self.timeout <= 0:
            from qcheck.errors import UsageError

            raise UsageError("QCHECK_HUB_TIMEOUT must be more than 0 seconds")
        headers = {"User-Agent": user_agent(), "Accept": "*/*"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        settings = Settings(timeout=min(self.timeout, 1e6), retries=self.retries, backoff=self.backoff,
                            max_backoff=self.max_wait, max_wait=self.max_wait)
        self._net = Client(settings, headers=headers, secrets=(self.token,))

    @classmethod
    def from_env(cls, *, retries: int | None = None) -> HubClient:
        """Endpoint, token and retry policy from the environment (``HF_ENDPOINT``, ``HF_TOKEN``, ``QCHECK_HUB_*``);
        ``retries`` overrides ``QCHECK_HUB_RETRIES``."""
        from huggingface_hub import get_token

        try:
            token = get_token()
        except Exception:  # a broken token file must not stop public repos
            token = None
        return cls(token=token) if retries is None else cls(token=token, retries=retries)

    @property
    def has_token(self) -> bool:
        return bool(self.token)

    def _count(self, key: str, nbytes: int, requests: int = 0) -> None:
        with self._lock:
            st = self.stats.setdefault(key, FileStats())
            st.requests += requests
            st.bytes += nbytes

    def total(self) -> FileStats:
        with self._lock:
            return FileStats(sum(s.requests for s in self.stats.values()), sum(s.bytes for s in self.stats.values()))

    def _failed(self, key: str) -> int:
        """Count a failed attempt on ``key``; returns the run's total for it (what messages report)."""
        with self._lock:
            st = self.stats.setdefault(key, FileStats())
            st.failed += 1
            return st.failed

    def request(self, method: str, url: str, call: Call, *, repo_id: str, what: str, revision: str | None = None,
                raise_for_status: bool = True) -> Response:
        """One logical request, retried on 408/429/5xx and transport errors; the body is cut at ``call.max_bytes``.

        ``what`` names the file (or 'repo info') for messages and counters. A body longer than ``max_bytes`` is
        not an error here (a range answered with 200 is cut); callers check lengths they care about. Every
        attempt and wait fits in the run's ``Budget``; attempt counts in messages are the run's total for ``what``.
        """
        if hub_offline():
            raise offline_error(self.endpoint)
        watch = _HubWatch(self, what, repo_id)
        try:
            resp = self._net.request(method, url, call, watch)
        except NetError as exc:
            raise network_error(exc, repo_id=repo_id, what=what, endpoint=self.endpoint, timeout=self.timeout,
                                attempts=exc.attempts, token=self.token) from None
        if resp.status in call.retry_statuses and resp.status >= 400:
            error = self.status_error(resp.status, resp.headers, repo_id, what, revision, resp.attempts)
            if resp.wait_refused and resp.status == 429:  # waiting cannot help within this run: stop every request
                self.budget.stop = error
            if raise_for_status or resp.wait_refused:
                raise error
        elif resp.status >= 400 and raise_for_status:
            raise self.status_error(resp.status, resp.headers, repo_id, what, revision, resp.attempts)
        self._count(what, len(resp.body))
        return resp

    def _announce_retry(self, what: str, reason: str, wait: float, attempt: int) -> None:
        """One stderr line per (reason, attempt) in a run, so a wait is never silent and parallel shards
        failing alike do not print one line each."""
        key = (reason, attempt)
        with _ANNOUNCE_LOCK:
            if key in self._announced:
                return
            self._announced.add(key)
        sys.stderr.write(f"qcheck: {reason} from {self.endpoint} ({what}); retrying in {wait:.1f} s "
                         f"(attempt {attempt + 1} of {self.retries + 1})\n")
        sys.stderr.flush()

    def status_error(self, status: int, hdrs: dict[str, str], repo_id: str, what: str,
                     revision: str | None, attempts: int) -> RemoteError:
        """The one-line RemoteError for a final HTTP error status (headers lower-cased)."""
        reply = StatusReply(status, error_code=hdrs.get("x-error-code"),
                            server_message=hdrs.get("x-error-message"), retry_after=retry_after(hdrs),
                            attempts=attempts)
        return http_error(reply, repo_id=repo_id, what=what, endpoint=self.endpoint, token=self.token,
                          had_token=self.has_token, revision=revision)

    def redact(self, text: str) -> str:
        return redact(text, self.token)

    def close(self) -> None:
        self._net.close()


class _HubWatch(Watch):
    """One request's view of the run: its budget (deadline, bytes, stop) and the per-file counters."""

    def __init__(self, client: HubClient, what: str, repo_id: str):
        super().__init__()
        self.client, self.what, self.repo_id = client, what, repo_id

    def remaining(self) -> float:
        return self.client.budget.remaining()

    def expired(self) -> RemoteError:
        return self.client.budget.deadline_error(self.what, self.repo_id, self.client.endpoint)

    def stopped(self) -> RemoteError | None:
        return self.client.budget.stop

    def attempt(self) -> None:
        self.client._count(self.what, 0, requests=1)

    def received(self, nbytes: int) -> None:
        self.client.budget.take(nbytes, self.what, self.repo_id, self.client.endpoint)

    def failed(self) -> int:
        return self.client._failed(self.what)

    def retrying(self, reason: str, wait: float, attempt: int, attempts: int) -> None:
        self.client._announce_retry(self.what, reason, wait, attempt)


_ANNOUNCE_LOCK = threading.Lock()
T = TypeVar("T")


class HubPool:
    """Daemon worker threads for concurrent header reads (what ``ThreadPoolExecutor`` would do, minus its join at
    interpreter exit): every network wait of a request ends at the run's deadline (``qcheck.net``), and a worker
    whose task is still running when the run ends (a parse, a name lookup left behind) never holds the process
    open. A thread starts with each task until there are ``workers``; a thread ends after ``idle`` seconds without
    work."""

    def __init__(self, workers: int, idle: float = 2.0):
        self.workers = max(1, workers)
        self.idle = idle
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()
        self._queue.put((fut, fn))  # before the count is read: a thread ends only when it sees an empty queue
        with self._lock:
            if self._threads >= self.workers:
                return fut
            self._threads += 1
        threading.Thread(target=self._run, name="qcheck-hub", daemon=True).start()
        return fut

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._threads -= 1
                        return
                continue
            if item is None:
                with self._lock:
                    self._threads -= 1
                return
            fut, fn = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to whoever waits on the future
                    fut.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel queued work and let every thread end (a running task finishes, or stalls, on its own)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        with self._lock:
            count = self._threads
        for _ in range(count):
            self._queue.put(None)


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)
