"""The probe's one HTTP function: a JSON request with a per-request timeout inside the probe's total deadline, a
bounded body, and the API key never reaching a message.

Every request goes through ``qcheck.net`` (qcheck's one HTTP stack: bounded bodies and headers, a deadline that
covers name resolution, connect and a server that drips bytes, redirects that never carry the key to another
host). The probe asks each question once: no retries, so a refusal is reported as the server gave it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from qcheck import net
from qcheck.errors import RemoteError, UsageError

__all__ = ["Deadline", "ProbeHTTPError", "Reply", "call", "check_url", "loads"]

#: the largest body read from one answer (a chat completion of a few tokens is a few kB)
MAX_BODY = 4 * 1024 * 1024
#: JSON from a server nested deeper than this is not parsed (an OpenAI answer is ~6 levels deep)
MAX_JSON_DEPTH = 64


def loads(text: str | bytes) -> object:
    """JSON from the server, or ValueError: invalid, or nested deeper than ``MAX_JSON_DEPTH`` (counted without
    recursion before the parser runs, so ``[[[[...`` is an answer qcheck cannot read, never a RecursionError)."""
    from qcheck.readers.jsonfile import structure_scan

    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth, _objects = structure_scan(data, MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(data.decode("utf-8") if isinstance(text, bytes) else text)
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


class ProbeHTTPError(RemoteError):
    """The server could not be reached or did not answer in time (no HTTP status)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> object:
        """The body as JSON, or None when it is not JSON qcheck can read (``loads``)."""
        try:
            return loads(self.body)
        except ValueError:
            return None


class Deadline:
    """The probe's total time budget."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def check_url(url: str) -> str:
    """The base URL without a trailing slash (``/v1`` kept when given); exit 2 for anything else."""
    from qcheck.report.sanitize import mask

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"{mask(url)!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    if parts.query or parts.fragment:
        raise UsageError(f"{mask(url)!r}: give the server's base URL without a query or fragment")
    return url.rstrip("/")


class _ProbeWatch(net.Watch):
    """One request's time: ``timeout`` or what is left of the probe's deadline, whichever ends first."""

    def __init__(self, deadline: Deadline, timeout: float, what: str):
        super().__init__()
        self.end = min(deadline.end, time.monotonic() + timeout)
        self.what = what
        self.limit = timeout

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> ProbeHTTPError:
        return ProbeHTTPError(f"{self.what}: the answer did not finish in {self.limit:.0f} s")


def call(method: str, url: str, body: object | None, *, api_key: str | None, deadline: Deadline,
         timeout: float = 30.0, max_bytes: int = MAX_BODY) -> Reply:
    """One request; raises ProbeHTTPError when there is no answer within ``timeout`` or the deadline, or the
    answer is larger than ``max_bytes``."""
    path = urlsplit(url).path or "/"
    what = f"{method} {path}"
    left = min(timeout, deadline.left())
    if left <= 0:
        raise ProbeHTTPError("the probe's deadline passed")
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "qcheck-probe"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    settings = net.Settings(timeout=min(left, 10.0), retries=0, attempt_limit=left, max_wait=0.0)
    call_spec = net.Call(max_bytes=max_bytes, body=data, retry_statuses=frozenset(), error_bytes=max_bytes)
    with net.Client(settings, headers=headers, secrets=(api_key,)) as client:
        try:
            resp = client.request(method, url, call_spec, _ProbeWatch(deadline, left, what))
        except net.NetError as exc:
            raise ProbeHTTPError(f"{what}: {exc}") from None
    if not resp.complete:
        raise ProbeHTTPError(f"{what}: the answer is larger than {max_bytes} bytes")
    return Reply(resp.status, resp.body)
