"""A lean HTTP/1.1 client for the Hub's many small GETs (a 160-shard model is 160 range reads).

Why: httpx spends ~0.7 ms of CPU per request (URL objects, event hooks, h11's state machine, the pool's
bookkeeping) where the exchange itself, a keep-alive socket and a ``Content-Length`` body, needs ~0.05 ms; on a
2-core machine 160 shards were CPU-bound in the client, not bound by the Hub's latency.

It is used only where it is what huggingface_hub's session would do (``plain_session``, ``usable``):
huggingface_hub's default client factory (no ``set_client_factory`` of the user's: custom transports, proxies,
certificates go through the session), no proxy configured, ``http``/``https`` URLs, GET/HEAD without query
parameters; ``QCHECK_HUB_SESSION=1`` turns it off. Like the session's request hook it sends an
``X-Amzn-Trace-Id`` per request. TLS uses ``httpx2.create_ssl_context()``, the session's own default
(``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured). Redirects are followed as httpx follows them (the Authorization
header is dropped on a change of origin). An answer it does not handle (chunked or compressed bodies, 1xx, a
redirect to another scheme) raises ``Unsupported`` before any of its body is read, and the caller asks the
session instead. Transport failures raise httpx2's exception types, so retries and messages are the same on
both paths. Every ``recv`` checks the run's deadline, so a server dripping bytes cannot hold a run past it, on
any thread, without a helper thread per request.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from qcheck.errors import RemoteError

MAX_REDIRECTS = 20  # httpx's default
MAX_HEAD = 64 * 1024  # status line and headers: a server sending more is broken or hostile
KEEPALIVE = 5.0  # seconds an idle connection is kept (httpcore's default expiry)
RECV = 256 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_BREAKS = re.compile(r"[\r\n\x00]")  # in a header name or value: would end the header early (injection)
_PLAIN = re.compile(r"[!-~]+\Z")  # printable ASCII, no spaces: what can go into a request line as it is


class Unsupported(Exception):
    """The answer needs what this client does not do; nothing of its body was read. Ask the session."""


def plain_session() -> bool:
    """True when huggingface_hub's session would add nothing to plain HTTP/1.1 for this run: its default client
    factory, no proxy (``urllib.request.getproxies()``, where httpx reads them: the environment, and the system
    settings on macOS and Windows), not in huggingface_hub's offline mode, and ``QCHECK_HUB_SESSION`` unset."""
    if os.environ.get("QCHECK_HUB_SESSION", "") not in ("", "0"):
        return False
    from urllib.request import getproxies

    proxies = getproxies()
    if any(proxies.get(k) for k in ("http", "https", "all")):
        return False
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils import _http
    except ImportError:
        return False
    if constants.is_offline_mode():  # the session refuses (OfflineModeIsEnabled): let it say so
        return False
    factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
    return factory is not None and factory is getattr(_http, "default_client_factory", object())


def usable(method: str, url: str, params: object) -> bool:
    """True when a request may take the lean path (given ``plain_session()``): GET/HEAD of an http(s) URL without
    query parameters to encode."""
    return not params and method in ("GET", "HEAD") and url.startswith(("http://", "https://"))


class Wire:
    """Keep-alive connections per origin, shared by the threads of one run (each connection used by one at a time)."""

    def __init__(self, keepalive: float = KEEPALIVE) -> None:
        self.keepalive = keepalive
        self._idle: dict[tuple[str, str, int], list[tuple[socket.socket, float]]] = {}
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    def exchange(self, method: str, url: str, headers: dict[str, str], max_bytes: int, timeout: float,
                 take: Callable[[int], None], remaining: Callable[[], float],
                 deadline: Callable[[], RemoteError]) -> tuple[int, dict[str, str], bytes, str]:
        """One exchange, redirects followed: (status, lower-cased headers, body cut at ``max_bytes``, final URL).
        An error status (>= 400) comes back with an empty body, as the session path returns it."""
        import httpx2

        headers = dict(headers)
        for _ in range(MAX_REDIRECTS + 1):
            status, hdrs, body = self._one(method, url, headers, max_bytes, timeout, take, remaining, deadline)
            location = hdrs.get("location")
            if status not in _REDIRECTS or location is None:
                return status, hdrs, body, url
            target = urljoin(url, location)
            if not target.startswith(("http://", "https://")):
                raise Unsupported(f"redirect to {target[:40]!r}")
            if _origin(target) != _origin(url):
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            if status == 303:
                method = "GET"
            url = target
        raise httpx2.TooManyRedirects("Exceeded maximum allowed redirects.")

    # -- one request on one connection -------------------------------------------------------------
    def _one(self, method: str, url: str, headers: dict[str, str], max_bytes: int, timeout: float,
             take: Callable[[int], None], remaining: Callable[[], float], deadline: Callable[[], RemoteError]
             ) -> tuple[int, dict[str, str], bytes]:
        import httpx2

        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = parts.netloc.rpartition("@")[2]
        if not _PLAIN.match(target) or not _PLAIN.match(host_header):  # a Location with spaces or non-ASCII
            raise Unsupported("a URL the session must encode")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Accept: */*", "Accept-Encoding: identity",
                 "Connection: keep-alive"]
        if any(_BREAKS.search(f"{k}{v}") for k, v in headers.items()):  # httpx refuses these in its own words
            raise Unsupported("a header with a line break")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if not any(k.lower() == "x-amzn-trace-id" for k in headers):
            lines.append(f"X-Amzn-Trace-Id: {uuid.uuid4()}")  # as huggingface_hub's request hook adds
        try:
            request = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        except UnicodeEncodeError:  # a header value httpx would refuse in its own words
            raise Unsupported("a non-ASCII header value") from None
        while True:
            sock, reused = self._checkout(key, timeout, remaining, deadline)
            conn = _Conn(sock, timeout, remaining, deadline)
            try:
                conn.send(request)
                status, hdrs = conn.read_head()
            except _StaleConnection:
                sock.close()
                if reused:
                    continue  # the server dropped an idle connection: once more on a new one
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.") from None
            except BaseException:
                sock.close()
                raise
            break
        try:
            body, reusable = conn.read_body(method, status, hdrs, max_bytes, take)
        except BaseException:
            sock.close()
            raise
        keep = hdrs.get("connection", "").lower()
        if reusable and keep != "close" and (conn.version == "HTTP/1.1" or keep == "keep-alive"):
            self._checkin(key, sock)
        else:
            sock.close()
        return status, hdrs, body

    def _checkout(self, key: tuple[str, str, int], timeout: float, remaining: Callable[[], float],
                  deadline: Callable[[], RemoteError]) -> tuple[socket.socket, bool]:
        now = time.monotonic()
        with self._lock:
            idle = self._idle.get(key)
            while idle:
                sock, since = idle.pop()
                if now - since < self.keepalive:
                    return sock, True
                sock.close()
        return self._connect(key, timeout, remaining, deadline), False

    def _checkin(self, key: tuple[str, str, int], sock: socket.socket) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append((sock, time.monotonic()))

    def _connect(self, key: tuple[str, str, int], timeout: float, remaining: Callable[[], float],
                 deadline: Callable[[], RemoteError]) -> socket.socket:
        import httpx2

        scheme, host, port = key
        left = remaining()
        if left <= 0:
            raise deadline()
        try:
            sock = socket.create_connection((host, port), timeout=min(timeout, left))
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc) or "timed out") from None
        except OSError as exc:  # refused, unreachable, no such host (gaierror): the text says which
            raise httpx2.ConnectError(str(exc)) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                if self._ssl is None:
                    self._ssl = httpx2.create_ssl_context()
                sock = self._ssl.wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:
            sock.close()
            raise httpx2.ConnectTimeout(str(exc) or "timed out") from None
        except OSError as exc:  # ssl.SSLError is an OSError: a certificate or handshake failure
            sock.close()
            raise httpx2.ConnectError(str(exc)) from None
        return sock

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for sock, _ in conns:
                sock.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at garbage collection
        try:
            self.close()
        except Exception:
            pass


class _StaleConnection(Exception):
    """The connection closed before the first byte of the answer."""


class _Conn:
    """Reads of one response on one socket; every wait is bounded by the per-read timeout and the run's deadline."""

    def __init__(self, sock: socket.socket, timeout: float, remaining: Callable[[], float],
                 deadline: Callable[[], RemoteError]):
        self.sock = sock
        self.timeout = timeout
        self.remaining = remaining
        self.deadline = deadline
        self.buf = bytearray()
        self.got_any = False
        self.version = ""

    def _settimeout(self) -> None:
        left = self.remaining()
        if left <= 0:
            raise self.deadline()
        self.sock.settimeout(min(self.timeout, left))

    def send(self, data: bytes) -> None:
        import httpx2

        self._settimeout()
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise httpx2.WriteTimeout(str(exc) or "timed out") from None
        except (BrokenPipeError, ConnectionResetError):
            raise _StaleConnection() from None
        except OSError as exc:
            raise httpx2.WriteError(str(exc)) from None

    def _recv(self, n: int) -> bytes:
        import httpx2

        self._settimeout()
        try:
            data = self.sock.recv(n)
        except TimeoutError as exc:
            if self.remaining() <= 0:
                raise self.deadline() from None
            raise httpx2.ReadTimeout(str(exc) or "timed out") from None
        except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:  # closed under us
            if not self.got_any:
                raise _StaleConnection() from None
            raise httpx2.ReadError(str(exc)) from None
        except OSError as exc:
            raise httpx2.ReadError(str(exc)) from None
        if data:
            self.got_any = True
        return data

    def read_head(self) -> tuple[int, dict[str, str]]:
        import httpx2

        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self.buf) > MAX_HEAD:
                raise httpx2.RemoteProtocolError("the response's status line and headers are over 64 KiB")
            data = self._recv(RECV)
            if not data:
                if not self.got_any:
                    raise _StaleConnection()
                raise httpx2.RemoteProtocolError("Server disconnected without sending a complete response.")
            self.buf += data
        head = bytes(self.buf[:end]).decode("latin-1")
        del self.buf[:end + 4]
        status_line, *lines = head.split("\r\n")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not (fields[1].isdigit() and len(fields[1]) == 3):
            raise httpx2.RemoteProtocolError(f"malformed status line {status_line[:80]!r}")
        status = int(fields[1])
        self.version = fields[0]
        hdrs: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise httpx2.RemoteProtocolError(f"malformed header line {line[:80]!r}")
            hdrs[name.lower()] = value.strip()
        if status < 200:
            raise Unsupported(f"HTTP {status}")
        return status, hdrs

    def read_body(self, method: str, status: int, hdrs: dict[str, str], max_bytes: int,
                  take: Callable[[int], None]) -> tuple[bytes, bool]:
        """(body cut at ``max_bytes``, whether the connection may be reused)."""
        import httpx2

        if method == "HEAD" or status in (204, 304):
            return b"", not self.buf
        if "transfer-encoding" in hdrs or hdrs.get("content-encoding", "identity").lower() != "identity":
            raise Unsupported("chunked or encoded body")
        raw = hdrs.get("content-length")
        length: int | None = None
        if raw is not None:
            if not raw.isdigit():
                raise httpx2.RemoteProtocolError(f"bad Content-Length {raw[:40]!r}")
            length = int(raw)
        if status >= 300:  # the body of an error or a redirect is not returned (as on the session path)
            if status >= 400 or length is None or length > MAX_HEAD:
                return b"", False
            self.read_body("GET", 200, hdrs, length, take)  # a short redirect body: read so the connection stays
            return b"", True
        want = max_bytes if length is None else min(length, max_bytes)
        parts: list[bytes] = []
        got = 0
        if self.buf:
            first = bytes(self.buf[:want])
            take(len(self.buf))
            parts.append(first)
            got = len(first)
            extra = len(self.buf) - len(first)
            self.buf.clear()
            if extra:  # more than the body, or than asked for: this connection is not reused
                return first, False
        while got < want:
            data = self._recv(min(RECV, want - got))
            if not data:
                if length is None:
                    return b"".join(parts), False
                raise httpx2.RemoteProtocolError(f"peer closed connection without sending complete message body "
                                                 f"(received {got} bytes, expected {length})")
            take(len(data))
            parts.append(data)
            got += len(data)
        complete = length is not None and got == length
        return b"".join(parts), complete


def _origin(url: str) -> tuple[str, str | None, int | None]:
    p = urlsplit(url)
    return p.scheme, p.hostname, p.port or (443 if p.scheme == "https" else 80)

