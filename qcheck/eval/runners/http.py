"""HTTP plumbing for endpoint candidates: JSON POST/GET with timeouts, retries with backoff, bounded bodies,
a secret that never reaches a message, concurrent fan-out, and an append-only resume state file.

The requests go through ``qcheck.net`` (httpx2), qcheck's one HTTP stack: an eval run must survive rate limits
(429 with ``Retry-After``), flaky gateways (5xx) and hung or dripping sockets, yet stop on a real refusal
(400, 401, 404) at once with the server's own words; and a run interrupted after N items must restart from
item N+1. ``--request-timeout`` bounds each whole attempt (name resolution, connect, TLS, the answer), not just
one read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from qcheck import net
from qcheck.errors import RemoteError, UsageError

#: statuses worth another attempt: rate limiting and gateway/server trouble
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: largest JSON body accepted from a server (a full-vocabulary echo of a long prompt stays far below)
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: longest wait honoured from a Retry-After header; a server asking for more ends the retries at once
MAX_RETRY_AFTER = 120.0
#: longest backoff between attempts when the server asks nothing
MAX_BACKOFF = 30.0
#: most memory one parsed answer may take (``qcheck.readers.jsonfile.parsed_size``): a full-vocabulary answer of the
#: largest size above takes ~450 MB; 64 MB of ``[[],[],...]`` would take ~1.9 GB
MAX_PARSED_BYTES = 512 * 1024 * 1024
#: largest resume state file read back
MAX_STATE_BYTES = 4 * 1024 * 1024 * 1024

T = TypeVar("T")
R = TypeVar("R")


class EndpointError(RemoteError):
    """An endpoint refused or failed a request after every retry (exit code 2)."""

    def __init__(self, message: str, *, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status = status
        self.body = body


def redact(text: str, secret: str | None) -> str:
    """Remove the API key (and anything shaped like a bearer token or provider key) from ``text``."""
    return net.redact(text, secret)


def server_message(body: bytes | str) -> str:
    """The error text of an OpenAI-style error body (``{"error": {"message": ...}}``), else the raw start."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if isinstance(err, list):  # FastAPI validation details
            err = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in err[:3])
        if err is not None:
            return " ".join(str(err).split())[:300]
    return " ".join(text.split())[:300]


@dataclass
class HttpClient:
    """JSON over HTTP to one base URL, retried with exponential backoff and jitter.

    ``retries`` is the number of *extra* attempts after the first; waits are ``backoff * 2**attempt`` (capped
    at 30 s, ±25 % jitter), or the server's ``Retry-After`` (a request asking for more than ``MAX_RETRY_AFTER``
    is not retried: the error says how long the server asked). ``timeout`` bounds each whole attempt.
    """

    base_url: str
    api_key: str | None = None
    timeout: float = 60.0
    retries: int = 5
    backoff: float = 0.5
    user_agent: str = "qcheck-eval"
    #: counters for tests, benchmarks and the report
    requests: int = 0
    retried: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/\s]+", self.base_url):
            raise UsageError(f"endpoint URL {self.base_url!r} must start with http:// or https://")
        self.base_url = self.base_url.rstrip("/")
        if not (self.timeout > 0 and self.retries >= 0 and self.backoff >= 0) or self.timeout == float("inf"):
            raise UsageError("timeout must be positive and finite, retries and backoff not negative")
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        settings = net.Settings(timeout=self.timeout, retries=self.retries, backoff=self.backoff,
                                max_backoff=MAX_BACKOFF, max_wait=MAX_RETRY_AFTER, attempt_limit=self.timeout,
                                jitter=0.25, retry_refused=True)
        self._net = net.Client(settings, headers=headers, secrets=(self.api_key,))

    def url(self, path: str) -> str:
        return self.base_url + path

    def post(self, path: str, body: dict[str, Any], *, retry_statuses: frozenset[int] = RETRY_STATUSES) -> Any:
        return self._call("POST", path, body, retry_statuses)

    def get(self, path: str, *, retry_statuses: frozenset[int] = RETRY_STATUSES) -> Any:
        return self._call("GET", path, None, retry_statuses)

    def close(self) -> None:
        self._net.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None, retry_statuses: frozenset[int]) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8") if body is not None else None
        limit = MAX_RESPONSE_BYTES
        call = net.Call(max_bytes=limit, body=data, retry_statuses=retry_statuses,
                        headers={"Content-Type": "application/json"} if data is not None else {})
        where = f"{method} {net.display_url(self.url(path))}"
        try:
            resp = self._net.request(method, self.url(path), call, _Counting(self))
        except net.NetError as exc:
            raise EndpointError(redact(f"{where}: {exc}", self.api_key)) from None
        if resp.status >= 400:
            message = redact(server_message(resp.body), self.api_key)
            extra = f" after {resp.attempts} attempts" if resp.attempts > 1 else ""
            if resp.wait_refused and resp.retry_after is not None:
                extra += (f" (the server asks to retry after {resp.retry_after:g} s, longer than the "
                          f"{MAX_RETRY_AFTER:g} s qcheck waits; finished requests are kept for a rerun)")
            raise EndpointError(f"{where}: HTTP {resp.status}{extra}: {message}", status=resp.status, body=message)
        if not resp.complete:
            raise EndpointError(f"{where}: response is over {limit} bytes")
        from qcheck.readers.jsonfile import MAX_COST_PER_BYTE, parsed_size

        # counted only for an answer that could be over the bound (over ~10 MB): the count costs a pass over the text
        cost = parsed_size(resp.body) if len(resp.body) * MAX_COST_PER_BYTE > MAX_PARSED_BYTES else 0
        if cost > MAX_PARSED_BYTES:
            raise EndpointError(f"{where}: the {len(resp.body)}-byte response would take about {cost >> 20} MB of "
                                f"memory to parse, over the {MAX_PARSED_BYTES >> 20} MB bound (a response of empty "
                                "or tiny arrays?)")
        try:
            return json.loads(resp.body)
        except RecursionError:
            raise EndpointError(f"{where}: the response JSON is nested too deeply") from None
        except ValueError:
            raise EndpointError(f"{where}: the response is not JSON "
                                f"({' '.join(resp.body[:120].decode('utf-8', 'replace').split())!r})") from None


class _Counting(net.Watch):
    """The client's request and retry counters, kept as the eval report shows them."""

    def __init__(self, client: HttpClient):
        super().__init__()
        self.client = client

    def attempt(self) -> None:
        with self.client._lock:
            self.client.requests += 1

    def retrying(self, reason: str, wait: float, attempt: int, attempts: int) -> None:
        with self.client._lock:
            self.client.retried += 1


def fan_out(func: Callable[[T], R], items: Iterable[T], concurrency: int,
            on_result: Callable[[T, R], None]) -> None:
    """Run ``func`` over ``items`` with ``concurrency`` threads; ``on_result`` is called (in this thread) as
    each finishes. The first exception stops new work and is raised once the running calls return."""
    pending_items = list(items)
    if not pending_items:
        return
    if concurrency <= 1:
        for item in pending_items:
            on_result(item, func(item))
        return
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="qcheck-endpoint") as pool:
        it = iter(pending_items)
        running: dict[Future[R], T] = {}
        failed: BaseException | None = None

        def submit_next() -> None:
            item = next(it, None)
            if item is not None:
                running[pool.submit(func, item)] = item

        for _ in range(concurrency):
            submit_next()
        while running:
            done, _ = wait(list(running), return_when=FIRST_EXCEPTION)
            for fut in done:
                item = running.pop(fut)
                exc = fut.exception()
                if exc is not None:
                    failed = failed or exc
                    continue
                on_result(item, fut.result())
                if failed is None:
                    submit_next()
        if failed is not None:
            raise failed


@dataclass(frozen=True)
class RunState:
    """Where one ``qcheck eval`` run keeps its endpoint results: ``<root>/<run_id>/``, one resume file per endpoint,
    each record signed with ``key`` (``qcheck.cache_auth``). ``resumed``: the user asked to continue this run
    (``--resume RUN``); otherwise the folder is new and nothing earlier is reused. ``root`` None (``--no-cache``):
    nothing is kept."""

    root: Path | None
    run_id: str
    key: bytes
    resumed: bool = False

    @property
    def folder(self) -> Path | None:
        return None if self.root is None else self.root / self.run_id


#: a run id: what ``new_run_id`` makes, or a name of the user's (a folder name, never a path)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def new_run_id() -> str:
    """A fresh run id: the UTC time and 6 random hex digits (``20261207-034512-a1b2c3``)."""
    import secrets
    import time

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise UsageError(f"--resume {run_id!r}: a run id is letters, digits, '.', '_' and '-' (at most 64), as "
                         "qcheck eval printed it")
    return run_id


class ResumeState:
    """Per-request results of one endpoint candidate, appended as JSON lines as they arrive.

    The file name is a hash of the run configuration (endpoint, model, mode, k, prompt format), and every
    record carries a hash of its request's token ids, so a rerun reuses exactly the requests that are done
    and identical. A run killed at any point (``kill -9`` included) loses at most the record it was writing: on
    load, a last line without its newline is cut off the file when it is not a whole record (or given its
    newline when it is), so the next record starts on a line of its own instead of being glued to the torn
    one and lost with it. Each record is flushed to the operating system as soon as it is written.

    With ``key``, each line also carries an HMAC of its record and the file's name (``qcheck.cache_auth``): a line
    written by anyone without the key (a planted or edited record) is not a record. The file must then be a regular
    file of this user that others may not write (never a FIFO or a link).
    """

    def __init__(self, path: Path | None, key: bytes | None = None):
        self.path = path
        self.key = key
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.loaded = 0
        self.rejected = 0
        if path is not None and os.path.lexists(path):
            if key is not None:
                from qcheck.cache_auth import private

                problem = private(path, directory=False)
                if problem:
                    raise UsageError(f"resume state not used: {problem}; delete it or start a new run")
            size = path.stat().st_size
            if size > MAX_STATE_BYTES:
                raise UsageError(f"resume state {path} is {size} bytes, over the {MAX_STATE_BYTES}-byte limit; "
                                 "delete it or pass --no-resume")
            self._load(path)
            self.loaded = len(self._data)

    def _load(self, path: Path) -> None:
        """Read every whole record; repair a torn last line (see the class docstring)."""
        with open(path, "rb+") as fh:
            start = 0
            torn: tuple[int, bool] | None = None  # (offset of the unterminated last line, whether it is a record)
            for line in fh:
                record = self._record(line)
                if not line.endswith(b"\n"):
                    torn = (start, record)
                start += len(line)
            if torn is None:
                return
            offset, whole = torn
            if whole:
                fh.seek(0, 2)
                fh.write(b"\n")
            else:
                fh.truncate(offset)

    def _mac(self, rid: str, value: Any) -> str | None:
        if self.key is None or self.path is None:
            return None
        from qcheck.cache_auth import sign

        blob = json.dumps([self.path.name, rid, value], separators=(",", ":"), sort_keys=True).encode()
        return sign(self.key, "qcheck endpoint resume record/1", blob)

    def _record(self, line: bytes) -> bool:
        """Keep one line's record; False when the line is not one (torn, not JSON, or not signed with the key)."""
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not (isinstance(rec, dict) and isinstance(rec.get("id"), str)):
            return False
        if self.key is not None:
            import hmac

            mac = rec.get("mac")
            if not (isinstance(mac, str) and hmac.compare_digest(mac, self._mac(rec["id"], rec.get("value")) or "")):
                self.rejected += 1
                return False
        self._data[rec["id"]] = rec.get("value")
        return True

    @staticmethod
    def record_id(kind: str, key: str, ids: tuple[int, ...], extra: str = "") -> str:
        h = hashlib.sha256(f"{kind}\0{key}\0{extra}\0".encode() + json.dumps(list(ids)).encode()).hexdigest()
        return h[:32]

    def get(self, rid: str) -> Any:
        return self._data.get(rid)

    def __contains__(self, rid: str) -> bool:
        return rid in self._data

    def put(self, rid: str, value: Any) -> None:
        with self._lock:
            self._data[rid] = value
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            line: dict[str, Any] = {"id": rid, "value": value}
            mac = self._mac(rid, value)
            if mac is not None:
                line["mac"] = mac
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line, separators=(",", ":")) + "\n")
                fh.flush()

    def __len__(self) -> int:
        return len(self._data)


def state_path(root: Path, config: dict[str, Any]) -> Path:
    """``<root>/endpoint-<hash of config>.jsonl``: one resume file per distinct candidate configuration."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return root / f"endpoint-{hashlib.sha256(blob.encode()).hexdigest()[:24]}.jsonl"


def env_secret(var: str | None) -> str | None:
    """The API key from environment variable ``var``; a usage error (naming the variable only) when unset."""
    if not var:
        return None
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", var):
        raise UsageError(f"--api-key-env {var!r} is not an environment variable name")
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable is not set")
    return value.strip()
