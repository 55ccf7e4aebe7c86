"""The probe's one HTTP function: a JSON request with a per-request timeout inside the probe's total deadline, a
bounded body read in small pieces (a server that drips bytes cannot hold it past the deadline), and the API key
never reaching a message.

Why stdlib ``http.client`` here: the project's shared HTTP client (one module for every endpoint, issue 27) is not
on main yet; every call of the probe goes through ``call`` below, so moving to it is a change in one place.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from qcheck.errors import RemoteError, UsageError

__all__ = ["Deadline", "ProbeHTTPError", "Reply", "call", "check_url"]

#: the largest body read from one answer (a chat completion of a few tokens is a few kB)
MAX_BODY = 4 * 1024 * 1024
_PIECE = 64 * 1024


class ProbeHTTPError(RemoteError):
    """The server could not be reached or did not answer in time (no HTTP status)."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> object:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None


class Deadline:
    """The probe's total time budget."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def check_url(url: str) -> str:
    """The base URL without a trailing slash (``/v1`` kept when given); exit 2 for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    if parts.query or parts.fragment:
        raise UsageError(f"{url!r}: give the server's base URL without a query or fragment")
    return url.rstrip("/")


def call(method: str, url: str, body: object | None, *, api_key: str | None, deadline: Deadline,
         timeout: float = 30.0, max_bytes: int = MAX_BODY) -> Reply:
    """One request; raises ProbeHTTPError when there is no answer within ``timeout`` or the deadline."""
    parts = urlsplit(url)
    left = min(timeout, deadline.left())
    if left <= 0:
        raise ProbeHTTPError("the probe's deadline passed")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=min(left, 10.0),
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=min(left, 10.0))
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "qcheck-probe"}
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    path = parts.path or "/"
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        chunks: list[bytes] = []
        size = 0
        start = time.monotonic()
        while True:
            if deadline.left() <= 0 or time.monotonic() - start > left:
                raise ProbeHTTPError(f"{method} {path}: the answer did not finish in {left:.0f} s")
            piece = resp.read1(_PIECE)
            if not piece:
                break
            size += len(piece)
            if size > max_bytes:
                raise ProbeHTTPError(f"{method} {path}: the answer is larger than {max_bytes} bytes")
            chunks.append(piece)
        return Reply(resp.status, b"".join(chunks))
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        raise ProbeHTTPError(f"{method} {path}: {type(exc).__name__}: {exc}".replace(api_key or "\0", "***")) from None
    finally:
        conn.close()
