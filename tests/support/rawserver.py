"""A server on 127.0.0.1 that answers with exactly the bytes a test scripts: malformed status lines, duplicate or
non-ASCII lengths, broken chunking, bombs, drips, loops. ``http.server`` cannot send most of these.

``RawServer(handler)``: ``handler(request, send)`` gets the parsed request (method, target, headers, body) and a
``send(bytes)`` that writes to the socket (raising ``ConnectionError`` once the client has gone); it returns
when the answer is complete (the connection is then closed), or returns ``"keep"`` to read the next request on
the same connection. Every request is logged in ``server.requests``. ``ForwardProxy`` is an HTTP proxy (absolute-form
requests relayed to their origin), for the proxy-from-the-environment tests.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class RawRequest:
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes = b""
    raw_headers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return urlsplit(self.target).path if "://" in self.target else self.target.split("?", 1)[0]


Handler = Callable[[RawRequest, Callable[[bytes], None]], object]


def response(status: str = "200 OK", body: bytes = b"", headers: list[tuple[str, str]] | None = None,
             length: bool = True) -> bytes:
    """An HTTP/1.1 answer's bytes; ``length`` adds a correct Content-Length unless the headers carry one."""
    hdrs = list(headers or [])
    if length and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in hdrs):
        hdrs.append(("Content-Length", str(len(body))))
    head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
    return head.encode("latin-1") + body


class RawServer:
    """``with RawServer(handler) as server:`` then ``server.url``."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1"):
        self.handler = handler
        self.requests: list[RawRequest] = []
        self.connections = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()  # wake accept()
        except OSError:
            pass
        self._sock.close()
        self._thread.join(5)

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._stop.is_set():
                conn.close()
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        buf = bytearray()
        try:
            while True:
                request = _read_request(conn, buf)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)

                def send(data: bytes) -> None:
                    try:
                        conn.sendall(data)
                    except OSError as exc:
                        raise ConnectionError(str(exc)) from None

                if self.handler(request, send) != "keep":
                    return
        except ConnectionError:
            pass
        except Exception as exc:  # a fault of the test's handler: reported by the test that reads errors
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def _read_request(conn: socket.socket, buf: bytearray) -> RawRequest | None:
    while b"\r\n\r\n" not in buf:
        try:
            data = conn.recv(65536)
        except OSError:
            return None
        if not data:
            return None
        buf += data
    end = buf.index(b"\r\n\r\n")
    head = bytes(buf[:end]).decode("latin-1")
    del buf[:end + 4]
    line, *lines = head.split("\r\n")
    method, target, _version = [*line.split(" ", 2), "", ""][:3]
    raw = [(k.strip(), v.strip()) for k, _, v in (h.partition(":") for h in lines)]
    headers = {k.lower(): v for k, v in raw}
    length = int(headers.get("content-length", "0") or 0)
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    body = bytes(buf[:length])
    del buf[:length]
    return RawRequest(method, target, headers, body, raw)


def drip(data: bytes, interval: float) -> Callable[[RawRequest, Callable[[bytes], None]], None]:
    """A handler that sends ``data`` one byte every ``interval`` seconds (until the client hangs up)."""

    def handler(request: RawRequest, send: Callable[[bytes], None]) -> None:
        for byte in data:
            send(bytes([byte]))
            time.sleep(interval)

    return handler


class ForwardProxy(RawServer):
    """An HTTP forward proxy for ``http://`` URLs: each absolute-form request is relayed to its origin with the
    standard library's socket (one request per connection); ``seen`` lists the absolute URLs it carried."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__(self._relay)

    def _relay(self, request: RawRequest, send: Callable[[bytes], None]) -> None:
        self.seen.append(request.target)
        parts = urlsplit(request.target)
        upstream = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            lines = [f"{request.method} {path or '/'} HTTP/1.1"]
            lines += [f"{k}: {v}" for k, v in request.raw_headers
                      if k.lower() not in ("connection", "proxy-connection", "keep-alive")]
            lines.append("Connection: close")
            upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body)
            while True:
                data = upstream.recv(65536)
                if not data:
                    return
                send(data)
        finally:
            upstream.close()
