"""httpx2's transport interface over httpcore2 connection pools whose every wait ends at the request's deadline.

httpcore2's own network backend resolves host names with a blocking ``getaddrinfo`` (no timeout at all) and
applies the per-operation timeouts only: a server that sends one byte every few seconds, in its status line
or its body, never trips them. Here:

* the deadline of the request running on this thread (``deadline(end)``) clamps every connect, TLS handshake,
  read and write; past it, ``DeadlinePassed`` is raised, whatever the server does;
* name resolution runs on a daemon helper thread that the caller stops waiting for at the connect timeout or
  the deadline (``getaddrinfo`` cannot be interrupted, so a stuck resolver is left behind, never waited for);
* proxies come from the environment as httpx reads them (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``; lower case wins), and connections to the proxy take the same bounded backend.

Why a transport of our own and not ``httpx2.HTTPTransport``: that class does not let a network backend in,
and a custom transport turns httpx's environment proxies off, so this one routes to them itself.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore2
import httpx2

_STATE = threading.local()
#: connections kept per pool: the Hub reader runs 64 workers
MAX_CONNECTIONS = 256
MAX_KEEPALIVE = 128
KEEPALIVE_EXPIRY = 5.0


class DeadlinePassed(Exception):
    """The request's deadline passed during a network wait (not an httpcore error: it passes through the pool)."""


class ResolveFailed(Exception):
    """The host name does not resolve."""


@contextmanager
def deadline(end: float | None) -> Iterator[None]:
    """Every network wait of this thread, until the block ends, stops at ``end`` (a ``time.monotonic()`` value;
    None: no deadline)."""
    previous = getattr(_STATE, "end", None)
    _STATE.end = end
    try:
        yield
    finally:
        _STATE.end = previous


def remaining() -> float:
    """Seconds left before this thread's deadline (``math.inf`` without one)."""
    end = getattr(_STATE, "end", None)
    return math.inf if end is None else end - time.monotonic()


def _clamp(timeout: float | None) -> float:
    """The timeout for one wait: the operation's own, cut at the deadline; raises when the deadline passed."""
    left = remaining()
    if left <= 0:
        raise DeadlinePassed()
    wait = left if timeout is None else min(timeout, left)
    return min(wait, threading.TIMEOUT_MAX)


def _expired_or(exc: BaseException) -> BaseException:
    """``DeadlinePassed`` when a timeout fired because the deadline had come, else ``exc`` itself."""
    return DeadlinePassed() if remaining() <= 0 else exc


def resolve(host: str, port: int, timeout: float | None) -> list[str]:
    """The addresses of ``host``, in the resolver's order; an address literal is returned as it is. The lookup
    runs on a daemon thread that is waited for at most ``timeout`` and the deadline."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return [host.strip("[]")]
    except ValueError:
        pass
    wait = _clamp(timeout)
    box: dict[str, Any] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            box["value"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=lookup, name="qcheck-resolve", daemon=True).start()
    if not done.wait(wait):
        raise _expired_or(httpcore2.ConnectTimeout(f"resolving {host} took longer than {wait:g} s"))
    if "error" in box:
        error = box["error"]
        raise ResolveFailed(f"{host}: {getattr(error, 'strerror', None) or error}") from None
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in box["value"]:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ResolveFailed(f"{host}: no address")
    return addresses


class _Stream(httpcore2.NetworkStream):
    """A connection whose every wait is clamped to the deadline of the request using it now."""

    def __init__(self, inner: httpcore2.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return self._inner.read(max_bytes, _clamp(timeout))
        except httpcore2.ReadTimeout as exc:
            raise _expired_or(exc) from None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self._inner.write(buffer, _clamp(timeout))
        except httpcore2.WriteTimeout as exc:
            raise _expired_or(exc) from None

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        try:
            return _Stream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout)))
        except httpcore2.ConnectTimeout as exc:
            raise _expired_or(exc) from None

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """httpcore2's socket backend behind a bounded resolver, with bounded streams."""

    def __init__(self) -> None:
        self._sync = httpcore2.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        last: BaseException | None = None
        for address in resolve(host, port, timeout):
            try:
                inner = self._sync.connect_tcp(address, port, timeout=_clamp(timeout), local_address=local_address,
                                               socket_options=socket_options)
            except httpcore2.ConnectTimeout as exc:
                raise _expired_or(exc) from exc
            except httpcore2.ConnectError as exc:  # refused or unreachable on this address: try the next
                last = exc
                continue
            return _Stream(inner)
        assert last is not None
        raise last

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        raise httpcore2.ConnectError("unix sockets are not used by qcheck")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# -- proxies from the environment --------------------------------------------------------------------------
def env_proxies(environ: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """``({"http"|"https"|"all": proxy URL}, NO_PROXY entries)`` from the environment, as httpx reads it through
    ``urllib.request.getproxies()`` on Linux: ``*_proxy`` variables in any case, the lower-case one winning,
    ``HTTP_PROXY`` ignored under CGI (``REQUEST_METHOD`` set), ``NO_PROXY=*`` meaning no proxy at all, and a proxy
    without a scheme taken as ``http://``. (The system proxy settings httpx also reads on macOS and Windows
    are not read.)"""
    env = dict(os.environ if environ is None else environ)
    found: dict[str, str] = {}
    for name, value in env.items():  # upper or mixed case first ...
        if name.lower().endswith("_proxy") and value and name != name.lower():
            found[name[:-6].lower()] = value
    for name, value in env.items():  # ... then the lower-case names win
        if name.endswith("_proxy") and name == name.lower():
            if value:
                found[name[:-6]] = value
            else:
                found.pop(name[:-6], None)
    if "REQUEST_METHOD" in env:
        found.pop("http", None)
    no_proxy = [h.strip() for h in found.get("no", "").split(",") if h.strip()]
    if "*" in no_proxy:
        return {}, []
    proxies = {scheme: (url if "://" in url else f"http://{url}")
               for scheme, url in found.items() if scheme in ("http", "https", "all")}
    return proxies, no_proxy


def bypasses(entry: str, scheme: str, host: str, port: int | None) -> bool:
    """Whether one ``NO_PROXY`` entry covers the URL, with httpx's rules: ``example.com`` covers it and its
    sub-domains, ``.example.com`` and ``*.example.com`` the sub-domains only, an address or ``localhost``
    itself; ``host:port`` that port only; ``scheme://host`` that scheme only."""
    text = entry.strip().lower()
    if "://" in text:
        want_scheme, _, text = text.partition("://")
        if want_scheme not in ("all", scheme):
            return False
    if "/" in text:  # a path or an address range: not something httpx matches either
        return False
    want_port: int | None = None
    if text.startswith("["):  # [::1] or [::1]:8080
        addr, _, tail = text[1:].partition("]")
        text = addr
        if tail.startswith(":") and tail[1:].isascii() and tail[1:].isdigit():
            want_port = int(tail[1:])
    elif text.count(":") == 1:
        name, _, p = text.partition(":")
        if p.isascii() and p.isdigit():
            text, want_port = name, int(p)
    if want_port is not None and want_port != port:
        return False
    host = host.lower().strip("[]")
    if text.startswith("*."):
        return host.endswith(text[1:]) and host != text[2:]
    if text.startswith("."):
        return host.endswith(text) and host != text[1:]
    if text.startswith("*"):
        text = text[1:]
    try:
        ipaddress.ip_address(text)
        return host == text
    except ValueError:
        pass
    return host == text or host.endswith("." + text)


class Transport(httpx2.BaseTransport):
    """Routes each request to a direct pool or to the environment's proxy for it; every pool uses the bounded
    backend. Certificates: ``httpx2.create_ssl_context`` (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self._ssl = httpx2.create_ssl_context(trust_env=True)
        self._proxies, self._no_proxy = env_proxies(environ)
        self._backend = _Backend()
        self._pools: dict[str, Any] = {}
        self._lock = threading.Lock()

    def proxy_for(self, url: httpx2.URL) -> str | None:
        """The proxy URL a request to ``url`` goes through, or None for a direct connection."""
        proxy = self._proxies.get(url.scheme) or self._proxies.get("all")
        if proxy is None or any(bypasses(e, url.scheme, url.host, url.port) for e in self._no_proxy):
            return None
        return proxy

    def _pool(self, proxy: str | None) -> Any:
        key = proxy or ""
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = self._make_pool(proxy)
            return pool

    def _make_pool(self, proxy: str | None) -> Any:
        common: dict[str, Any] = {"ssl_context": self._ssl, "max_connections": MAX_CONNECTIONS,
                                  "max_keepalive_connections": MAX_KEEPALIVE, "keepalive_expiry": KEEPALIVE_EXPIRY,
                                  "network_backend": self._backend}
        if proxy is None:
            return httpcore2.ConnectionPool(**common)
        spec = httpx2.Proxy(url=proxy)
        url = httpcore2.URL(scheme=spec.url.raw_scheme, host=spec.url.raw_host, port=spec.url.port,
                            target=spec.url.raw_path)
        if spec.url.scheme in ("http", "https"):
            return httpcore2.HTTPProxy(proxy_url=url, proxy_auth=spec.raw_auth, proxy_headers=spec.headers.raw,
                                       proxy_ssl_context=spec.ssl_context, **common)
        if spec.url.scheme in ("socks5", "socks5h"):
            try:
                return httpcore2.SOCKSProxy(proxy_url=url, proxy_auth=spec.raw_auth, **common)
            except ImportError:
                raise httpcore2.UnsupportedProtocol(
                    "the SOCKS proxy in the environment needs the socksio package (pip install socksio)") from None
        raise httpcore2.UnsupportedProtocol(f"the proxy in the environment has an unknown scheme {spec.url.scheme!r}")

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        pool = self._pool(self.proxy_for(request.url))
        inner = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                              target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        response = pool.handle_request(inner)
        return httpx2.Response(status_code=response.status, headers=response.headers,
                               stream=_Body(response.stream), extensions=response.extensions)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class _Body(httpx2.SyncByteStream):
    """A response body as httpx2 iterates it (httpcore2's errors pass through; the client classifies them)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()
