"""Bounded HTTP to the Hub, with retries, on huggingface_hub's own session and headers.

Why not ``huggingface_hub.utils.http_backoff``: it reads whole bodies (a server that ignores ``Range`` would
stream the weights), its waits are not tunable per run, and it logs rather than returns what went wrong.
Here every body is streamed and cut at the length asked for, 429/5xx/timeouts are retried with
exponential backoff (``Retry-After`` honoured, capped), and each call is counted per file so tests and
``bench/`` can show that only headers were fetched. The session is ``huggingface_hub.get_session()`` so a
user's proxy or certificate set-up (``set_client_factory``) applies; the headers come from
``build_hf_headers`` (token from ``HF_TOKEN`` or the ``hf auth login`` file, user agent). Where the session would
do nothing more than plain HTTP/1.1 (its default factory, no proxy), GETs take ``qcheck.hub.wire`` instead: the
same exchange at a tenth of the CPU per request.

Every exchange of a run draws on one ``Budget``: a total deadline (``QCHECK_HUB_DEADLINE``, a server that
drips one byte every few seconds cannot keep a CI job alive: per-read timeouts never fire on it) and a total
byte count (``QCHECK_HUB_MAX_BYTES``). An attempt made from the caller's thread runs in a helper thread the caller
stops waiting for at the deadline, so even a server that drips its status line ends the run on time; on a
``HubPool`` worker (the many-shard prefetch) it runs in the worker itself, whose waiters wait only until the
deadline, and the worker is a daemon thread, so a stalled one never holds the process open. Requests libraries would make
on qcheck's behalf count too: ``build_hf_headers`` fetches the Hub's agent-harness registry (an unbounded body)
unless its cache is fresh, so qcheck gives it the cached registry or none, and never lets it fetch.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from qcheck.budget import Budget, env_float, run_budget
from qcheck.errors import RemoteError
from qcheck.hub import wire
from qcheck.hub.errors import http_error, network_error, redact

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


def _bounded_agent_registry() -> None:
    """Keep ``build_hf_headers`` from fetching ``/api/agent-harnesses`` itself (unbounded body, its own
    timeouts): give huggingface_hub its fresh cached copy (at most 1 MiB) or an empty registry. The registry
    only adds ``agent/NAME`` to the user agent; it never changes what is read."""
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils import _detect_agent
    except ImportError:  # an older huggingface_hub: no registry, nothing fetched
        return
    if getattr(_detect_agent, "_registry", "absent") is not None:
        return
    registry: Any = None
    path = getattr(constants, "AGENT_HARNESSES_PATH", None)
    try:
        if path and os.path.getsize(path) <= 1 << 20 and time.time() - os.path.getmtime(path) < 24 * 3600:
            with open(path, encoding="utf-8") as fh:
                registry = json.load(fh)
    except (OSError, ValueError, RecursionError):
        registry = None
    valid = (isinstance(registry, dict) and isinstance(registry.get("standardEnvVars", []), list)
             and isinstance(registry.get("harnesses", {}), dict))
    _detect_agent._registry = registry if valid else {"standardEnvVars": [], "harnesses": {}}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    url: str  # the final URL after redirects
    attempts: int = 1


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
        self._wire = wire.Wire()
        self._plain = wire.plain_session()  # read once per client: a run's settings do not change under it
        self._announced: set[tuple[str, int]] = set()
        from huggingface_hub.utils import build_hf_headers

        _bounded_agent_registry()

        from qcheck import __version__

        self._headers = build_hf_headers(token=self.token or False, library_name="qcheck",
                                         library_version=__version__)

    @classmethod
    def from_env(cls) -> HubClient:
        """Endpoint, token and retry policy from the environment (``HF_ENDPOINT``, ``HF_TOKEN``, ``QCHECK_HUB_*``)."""
        from huggingface_hub import get_token

        try:
            token = get_token()
        except Exception:  # a broken token file must not stop public repos
            token = None
        return cls(token=token)

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

    def request(self, method: str, url: str, *, repo_id: str, what: str, max_bytes: int,
                headers: dict[str, str] | None = None, params: dict[str, str] | None = None,
                revision: str | None = None, send_auth: bool = True, raise_for_status: bool = True) -> Response:
        """One logical request, retried on 408/429/5xx and transport errors; the body is cut at ``max_bytes``.

        ``what`` names the file (or 'repo info') for messages and counters. A body longer than ``max_bytes`` is
        not an error here (a range answered with 200 is cut); callers check lengths they care about. Every
        attempt and wait fits in the run's ``Budget``; attempt counts in messages are the run's total for ``what``.
        """
        import httpx2
        from huggingface_hub.errors import OfflineModeIsEnabled

        all_headers = dict(self._headers) if send_auth else {k: v for k, v in self._headers.items()
                                                             if k.lower() != "authorization"}
        all_headers.update(headers or {})
        budget = self.budget
        attempt = 0
        while True:
            attempt += 1
            if budget.stop is not None:
                raise budget.stop
            remaining = budget.remaining()
            if remaining <= 0:
                raise budget.deadline_error(what, repo_id, self.endpoint)
            self._count(what, 0, requests=1)
            try:
                status, hdrs, body, final_url = self._attempt(method, url, all_headers, params, max_bytes,
                                                              min(self.timeout, remaining), what, repo_id)
            except RemoteError:
                raise
            except OfflineModeIsEnabled:
                raise RemoteError(f"cannot reach {self.endpoint}: huggingface_hub is in offline mode "
                                  "(HF_HUB_OFFLINE was set when it was imported)") from None
            except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as exc:
                failed = self._failed(what)
                wait = min(self.max_wait, self.backoff * 2 ** (attempt - 1))
                if attempt <= self.retries and wait < budget.remaining() and not unfixable(exc):
                    self._announce_retry(what, type(exc).__name__, wait, attempt)
                    time.sleep(wait)
                    continue
                raise network_error(exc, repo_id=repo_id, what=what, endpoint=self.endpoint,
                                    timeout=self.timeout, attempts=failed, token=self.token) from None
            except httpx2.HTTPError as exc:
                raise network_error(exc, repo_id=repo_id, what=what, endpoint=self.endpoint,
                                    timeout=self.timeout, attempts=self._failed(what), token=self.token) from None
            if status in RETRY_STATUSES:
                failed = self._failed(what)
                if attempt <= self.retries:
                    wait = self._wait(attempt, hdrs)
                    if wait is not None and wait < budget.remaining():
                        self._announce_retry(what, f"HTTP {status}", wait, attempt)
                        time.sleep(wait)
                        continue
                    # waiting cannot help within this run: stop every other request of the run too
                    error = self.status_error(status, hdrs, repo_id, what, revision, failed)
                    if status == 429:
                        budget.stop = error
                    raise error
                if raise_for_status:
                    raise self.status_error(status, hdrs, repo_id, what, revision, failed)
            elif status >= 400 and raise_for_status:
                raise self.status_error(status, hdrs, repo_id, what, revision, attempt)
            self._count(what, len(body))
            return Response(status, hdrs, body, final_url, attempt)

    def _attempt(self, method: str, url: str, headers: dict[str, str], params: dict[str, str] | None,
                 max_bytes: int, timeout: float, what: str, repo_id: str) -> tuple[int, dict[str, str], bytes, str]:
        """One HTTP exchange in a helper thread, abandoned at the run's deadline: per-read timeouts cannot
        stop a server that sends one byte every few seconds, in the status line, headers or body."""
        if self._plain and wire.usable(method, url, params):
            budget = self.budget
            try:
                return self._wire.exchange(
                    method, url, headers, max_bytes, timeout,
                    take=lambda n: budget.take(n, what, repo_id, self.endpoint), remaining=budget.remaining,
                    deadline=lambda: budget.deadline_error(what, repo_id, self.endpoint))
            except wire.Unsupported:
                pass  # an answer only the session reads (chunked, compressed...): the same request through it
        cancelled = threading.Event()
        if getattr(_WORKER, "active", False):  # a HubPool worker: its waiters are bounded by the deadline already
            return self._exchange(method, url, headers, params, max_bytes, timeout, cancelled, what, repo_id)
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = self._exchange(method, url, headers, params, max_bytes, timeout, cancelled,
                                              what, repo_id)
            except BaseException as exc:  # handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=run, name="qcheck-hub-attempt", daemon=True)
        worker.start()
        worker.join(max(0.0, self.budget.remaining()))
        if worker.is_alive():
            cancelled.set()
            raise self.budget.deadline_error(what, repo_id, self.endpoint)
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]

    def _exchange(self, method: str, url: str, headers: dict[str, str], params: dict[str, str] | None,
                  max_bytes: int, timeout: float, cancelled: threading.Event, what: str,
                  repo_id: str) -> tuple[int, dict[str, str], bytes, str]:
        import httpx2
        from huggingface_hub.utils import get_session

        with get_session().stream(method, url, headers=headers, params=params, timeout=httpx2.Timeout(timeout),
                                  follow_redirects=True) as r:
            status = r.status_code
            hdrs = {k.lower(): v for k, v in r.headers.items()}
            body = bytearray()
            if method != "HEAD" and status < 400:
                for chunk in r.iter_bytes():
                    if cancelled.is_set():
                        break
                    if self.budget.remaining() <= 0:  # a body dripping in on a worker that nobody abandons
                        raise self.budget.deadline_error(what, repo_id, self.endpoint)
                    self.budget.take(len(chunk), what, repo_id, self.endpoint)
                    body += chunk
                    # '>' not '>=': a range answered with exactly the bytes asked for is read to its end, so
                    # the connection goes back to the pool (leaving it mid-response closes it: a new TCP
                    # connection per shard); only a body longer than asked for (Range ignored) is cut off
                    if len(body) > max_bytes:
                        del body[max_bytes:]
                        break
            return status, hdrs, bytes(body), str(r.url)

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

    def _wait(self, attempt: int, hdrs: dict[str, str]) -> float | None:
        retry_after = _retry_after(hdrs)
        if retry_after is not None:
            return retry_after if retry_after <= self.max_wait else None
        return min(self.max_wait, self.backoff * 2 ** (attempt - 1))

    def status_error(self, status: int, hdrs: dict[str, str], repo_id: str, what: str,
                     revision: str | None, attempts: int) -> RemoteError:
        """The one-line RemoteError for a final HTTP error status (headers lower-cased)."""
        return http_error(status, repo_id=repo_id, what=what, endpoint=self.endpoint,
                          error_code=hdrs.get("x-error-code"), server_message=hdrs.get("x-error-message"),
                          token=self.token, had_token=self.has_token, revision=revision, attempts=attempts,
                          retry_after=_retry_after(hdrs))

    def redact(self, text: str) -> str:
        return redact(text, self.token)


_ANNOUNCE_LOCK = threading.Lock()
_WORKER = threading.local()
T = TypeVar("T")


class HubPool:
    """Daemon worker threads for concurrent header reads (what ``ThreadPoolExecutor`` would do, minus its join at
    interpreter exit): requests run directly on the worker, not in a helper thread per attempt, and a worker stalled
    by a dripping server cannot keep the process alive after the run's deadline. A thread starts with each task
    until there are ``workers``; a thread ends after ``idle`` seconds without work."""

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
        _WORKER.active = True
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


def unfixable(exc: BaseException) -> bool:
    """A transport error that retrying cannot fix within a run: the host name does not resolve (offline,
    a typo in HF_ENDPOINT) or nothing listens on the port (connection refused)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(s in text for s in ("name or service not known", "nodename nor servname", "name resolution",
                                   "getaddrinfo", "no address associated", "connection refused", "errno 111"))


def _retry_after(hdrs: dict[str, str]) -> float | None:
    """Seconds the server asks us to wait: the Hub's ``RateLimit: "api";r=0;t=55`` when exhausted (parsed by
    huggingface_hub's ``parse_ratelimit_headers``, as its own backoff does), else ``Retry-After`` seconds."""
    try:
        from huggingface_hub.utils import parse_ratelimit_headers

        info = parse_ratelimit_headers(hdrs)
    except Exception:  # an unparseable header is no reason to fail
        info = None
    if info is not None and info.remaining == 0:
        return float(info.reset_in_seconds)
    raw = (hdrs.get("retry-after") or "").strip()
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)
