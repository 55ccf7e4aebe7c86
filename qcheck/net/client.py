"""``Client``: one logical HTTP request, retried, redirected, bounded in time and size, failing in one line.

See ``qcheck.net`` for the contract. Retries: statuses in ``Call.retry_statuses`` and transient transport
failures (timeouts, a connection closed mid-answer, a failed connect; a refused connection only with
``Settings.retry_refused``), waiting ``Retry-After`` (any form; see ``qcheck.net.retry``) or an exponential
backoff. A wait longer than ``Settings.max_wait`` or than the time left is never slept: the last answer (or
error) is returned at once, marked ``wait_refused``.
"""

from __future__ import annotations

import math
import random
import re
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpcore2
import httpx2

from qcheck.errors import RemoteError
from qcheck.net import errors as E
from qcheck.net.body import Malformed, content_length, read_bounded
from qcheck.net.retry import backoff, retry_after
from qcheck.net.transport import DeadlinePassed, ResolveFailed, Transport, deadline

#: statuses worth another attempt: request timeout, rate limiting, gateway and server trouble
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: a redirect's body up to this size is read (and dropped) so its connection can be reused; a longer one closes it
_SMALL_REDIRECT_BODY = 4096


@dataclass(frozen=True)
class Settings:
    """How one client retries and times out. ``timeout`` bounds each connect, read and write (seconds);
    ``attempt_limit`` (optional) the whole of one attempt: resolution, connect, TLS, redirects and body."""

    timeout: float = 10.0
    retries: int = 3
    backoff: float = 0.5
    #: longest backoff between attempts
    max_backoff: float = 30.0
    #: longest wait honoured, Retry-After included; a longer one ends the retries at once
    max_wait: float = 30.0
    attempt_limit: float | None = None
    #: each backoff is scaled by a random factor in [1 - jitter, 1 + jitter]
    jitter: float = 0.0
    #: retry a refused connection (a server restarting) instead of failing at once
    retry_refused: bool = False
    max_redirects: int = 20

    def __post_init__(self) -> None:
        numbers = (self.timeout, self.backoff, self.max_backoff, self.max_wait, self.jitter)
        if not all(math.isfinite(x) and x >= 0 for x in numbers) or self.timeout <= 0 or self.jitter >= 1:
            raise ValueError(f"bad HTTP settings {self}")
        if self.retries < 0 or self.max_redirects < 0:
            raise ValueError(f"bad HTTP settings {self}")
        if self.attempt_limit is not None and not (math.isfinite(self.attempt_limit) and self.attempt_limit > 0):
            raise ValueError(f"bad HTTP settings {self}")


@dataclass(frozen=True)
class Call:
    """One logical request beyond its method and URL. ``max_bytes`` bounds the decoded body kept (a longer one is
    cut and the connection dropped); an error status (>= 400) keeps at most ``error_bytes`` of its body.
    ``identity`` asks for the bytes as stored (``Accept-Encoding: identity``: range reads)."""

    max_bytes: int
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    send_auth: bool = True
    retry_statuses: frozenset[int] = RETRY_STATUSES
    identity: bool = False
    error_bytes: int = 64 * 1024


@dataclass
class Response:
    """A final answer: the status after redirects, lower-cased headers (repeated ones joined by ', '), the body
    (cut at ``Call.max_bytes``; ``complete`` False when it was cut), the final URL, attempts made (as the
    ``Watch`` counts them), the wait the server asked for (seconds) and whether a wait was refused as too long."""

    status: int
    headers: dict[str, str]
    body: bytes
    url: str
    attempts: int = 1
    complete: bool = True
    retry_after: float | None = None
    wait_refused: bool = False


class Watch:
    """A caller's hooks into one logical request: its deadline and byte budget, counters and retry notices. This
    base has no deadline and counts attempts that failed; subclasses (the Hub's run budget, the eval client's
    counters) override what they need."""

    def __init__(self) -> None:
        self.failures = 0

    def remaining(self) -> float:
        """Seconds left for the whole request, retries and waits included."""
        return math.inf

    def expired(self) -> RemoteError:
        """The error to raise when ``remaining()`` reached 0."""
        return E.NetError(E.DEADLINE, "the deadline passed")

    def stopped(self) -> RemoteError | None:
        """An error that stops this request before its next attempt (another request of the run decided it)."""
        return None

    def attempt(self) -> None:
        """An attempt starts."""

    def received(self, nbytes: int) -> None:
        """``nbytes`` bytes of a body arrived (as sent: compressed); may raise to stop the read."""

    def failed(self) -> int:
        """An attempt failed (a retryable status or a transport error); returns the count to report."""
        self.failures += 1
        return self.failures

    def retrying(self, reason: str, wait: float, attempt: int, attempts: int) -> None:
        """Attempt ``attempt`` failed for ``reason``; attempt ``attempt + 1`` of at most ``attempts`` follows in
        ``wait`` seconds."""


class Client:
    """Requests to any server, sharing one connection pool (thread-safe: the Hub reader calls it from 64
    workers). ``headers`` are sent with every request; ``secrets`` never appear in a message. No cookies are
    kept and nothing else is added: ``httpx2.Request`` goes straight to the bounded ``Transport``."""

    def __init__(self, settings: Settings | None = None, *, headers: Mapping[str, str] | None = None,
                 secrets: tuple[str | None, ...] = (), environ: dict[str, str] | None = None):
        self.settings = settings or Settings()
        self.headers = {k: v for k, v in (headers or {}).items()}
        self.secrets = tuple(s for s in secrets if s)
        self._environ = environ
        self._pool: Transport | None = None
        self._lock = threading.Lock()

    # -- the connection pool ------------------------------------------------------------------------
    def _transport(self) -> Transport:
        with self._lock:
            if self._pool is None:
                self._pool = Transport(self._environ)
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one logical request ------------------------------------------------------------------------
    def request(self, method: str, url: str, call: Call, watch: Watch | None = None) -> Response:
        """Send ``method url``, retrying and following redirects; the final answer whatever its status (an
        error status's body is kept up to ``Call.error_bytes``). Raises ``NetError`` (one line, redacted) when no
        answer came, ``watch.expired()`` at the deadline, and whatever ``watch`` raises."""
        watch = watch or Watch()
        s = self.settings
        attempt = 0
        while True:
            attempt += 1
            stop = watch.stopped()
            if stop is not None:
                raise stop
            if watch.remaining() <= 0:
                raise watch.expired()
            watch.attempt()
            try:
                response = self._attempt(method, url, call, watch)
            except E.NetError as exc:
                failed = watch.failed()
                wait = self._backoff(attempt)
                retryable = exc.kind in E.TRANSIENT or (exc.kind == E.REFUSED and s.retry_refused)
                if retryable and attempt <= s.retries and wait < watch.remaining():
                    watch.retrying(_reason(exc), wait, attempt, s.retries + 1)
                    time.sleep(wait)
                    continue
                raise exc.with_attempts(failed) from None
            if response.status not in call.retry_statuses:
                response.attempts = attempt
                return response
            response.attempts = watch.failed()
            response.retry_after = retry_after(response.headers)
            if attempt > s.retries:
                return response
            wait = self._backoff(attempt) if response.retry_after is None else response.retry_after
            if wait > s.max_wait or wait >= watch.remaining():
                response.wait_refused = True
                return response
            watch.retrying(f"HTTP {response.status}", wait, attempt, s.retries + 1)
            time.sleep(wait)

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        wait = backoff(attempt, s.backoff, s.max_backoff)
        return wait * random.uniform(1 - s.jitter, 1 + s.jitter) if s.jitter else wait

    def _attempt(self, method: str, url: str, call: Call, watch: Watch) -> Response:
        """One attempt, redirects followed, under the earlier of the attempt's limit and the caller's deadline."""
        now = time.monotonic()
        limit = self.settings.attempt_limit
        left = watch.remaining()
        end = min(now + limit if limit is not None else math.inf, now + left if math.isfinite(left) else math.inf)
        try:
            with deadline(end if math.isfinite(end) else None):
                return self._follow(method, url, call, watch)
        except DeadlinePassed:
            if watch.remaining() <= 0:
                raise watch.expired() from None
            raise E.NetError(E.TIMEOUT, f"no complete answer within the {limit:g} s limit of one attempt",
                             url=url) from None
        except (Malformed, httpcore2.TimeoutException, httpcore2.NetworkError, httpcore2.ProtocolError,
                httpcore2.ProxyError, httpcore2.UnsupportedProtocol, httpx2.HTTPError, httpx2.InvalidURL,
                httpx2.StreamError, ResolveFailed, ssl.SSLError, OSError, UnicodeError) as exc:
            raise classify(exc, url, self.secrets) from None

    def _follow(self, method: str, url: str, call: Call, watch: Watch) -> Response:
        headers = {**self.headers, **call.headers}
        if not call.send_auth:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers.setdefault("Accept-Encoding", "identity" if call.identity else "gzip, deflate")
        if method == "HEAD":  # a server that sends a body anyway would have it read as the next answer: no reuse
            headers["Connection"] = "close"
        body, params = call.body, call.params
        transport = self._transport()
        t = self.settings.timeout
        timeouts = {"connect": t, "read": t, "write": t, "pool": t}
        for _hop in range(self.settings.max_redirects + 1):
            request = httpx2.Request(method, url, headers=headers, params=params, content=body,
                                     extensions={"timeout": timeouts})
            response = _send(transport, request)
            try:
                location = response.headers.get("location")
                if response.status_code not in _REDIRECTS or location is None:
                    return self._read(method, response, call, watch)
                target = _redirect_target(response, location)
                _drain_small(response)
            finally:
                response.close()
            if _origin(target) != _origin(request.url):  # never carry credentials to another origin
                headers = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}
            if (response.status_code == 303 and method != "HEAD") or (
                    response.status_code in (301, 302) and method == "POST"):
                method, body = "GET", None  # RFC 9110 §15.4.4; 301/302 after POST as every browser does
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            url, params = str(target), None  # the Location carries its own query
        raise E.NetError(E.REDIRECT, f"more than {self.settings.max_redirects} redirects (a redirect loop?)",
                         url=url)

    def _read(self, method: str, response: httpx2.Response, call: Call, watch: Watch) -> Response:
        headers = _joined(response.headers)
        length = content_length(response.headers.get_list("content-length"))
        final = str(response.url)
        if method == "HEAD" or response.status_code in (204, 304) or length == 0:
            for _ in response.iter_raw():  # nothing comes; reaching the end lets the connection be reused
                pass
            return Response(response.status_code, headers, b"", final)
        limit = call.max_bytes if response.status_code < 400 else min(call.max_bytes, call.error_bytes)
        data, complete = read_bounded(response.iter_raw(), limit, headers.get("content-encoding"), watch.received)
        return Response(response.status_code, headers, data, final, complete=complete)


def _send(transport: Transport, request: httpx2.Request) -> httpx2.Response:
    """One exchange; a GET or HEAD whose kept-alive connection turns out closed before any answer (the server
    dropped it while idle, without saying so) is sent once more, on a new connection, as browsers do."""
    for again in (True, False):
        try:
            response = transport.handle_request(request)
        except (httpcore2.RemoteProtocolError, httpcore2.ReadError, httpcore2.WriteError) as exc:
            unanswered = isinstance(exc, (httpcore2.ReadError, httpcore2.WriteError)) or \
                "without sending a response" in str(exc)
            if again and unanswered and request.method in ("GET", "HEAD"):
                continue
            raise
        response.request = request
        return response
    raise AssertionError("unreachable")


def _joined(headers: httpx2.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in headers:
        out[key.lower()] = ", ".join(headers.get_list(key))
    return out


def _origin(url: httpx2.URL) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port filled in (``URL.origin`` is not in every httpx2)."""
    return url.scheme, url.host.lower(), url.port or (443 if url.scheme == "https" else 80)


def _redirect_target(response: httpx2.Response, location: str) -> httpx2.URL:
    """The absolute URL a redirect points to; only http(s)."""
    try:
        target = response.request.url.join(location)
    except (httpx2.InvalidURL, ValueError, UnicodeError):
        raise E.NetError(E.REDIRECT, f"a redirect to an unusable URL {location[:80]!r}",
                         url=str(response.request.url)) from None
    if target.scheme not in ("http", "https") or not target.host:
        raise E.NetError(E.REDIRECT, f"a redirect to {E.display_url(str(target))[:80]!r}, not an http(s) URL",
                         url=str(response.request.url))
    return target


def _drain_small(response: httpx2.Response) -> None:
    """Read a short redirect body so its connection goes back to the pool; its bytes are dropped, never used."""
    try:
        length = content_length(response.headers.get_list("content-length"))
    except Malformed:
        return
    if length is not None and length <= _SMALL_REDIRECT_BODY and "transfer-encoding" not in response.headers:
        for _ in response.iter_raw():
            pass


def _reason(exc: E.NetError) -> str:
    return {E.TIMEOUT: "timeout", E.CLOSED: "connection closed", E.CONNECT: "connection failed",
            E.REFUSED: "connection refused"}.get(exc.kind, exc.kind)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(out) < 6:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


_TIMEOUTS = (httpcore2.TimeoutException, httpx2.TimeoutException, TimeoutError)
_CONNECT = (httpcore2.ConnectError, httpx2.ConnectError, httpcore2.ProxyError, httpx2.ProxyError)
_LOCAL = (httpcore2.LocalProtocolError, httpx2.LocalProtocolError, httpcore2.UnsupportedProtocol,
          httpx2.UnsupportedProtocol, httpx2.InvalidURL, httpx2.StreamError, UnicodeError)


_BYTEARRAY = re.compile(r"""bytearray\((b(['"]).*?\2)\)""")


def _plain(text: str) -> str:
    """h11's wording made readable: ``bytearray(b'HTTP/1.1 2OO OK')`` -> ``b'HTTP/1.1 2OO OK'``, and its buffer limit
    named (it refuses a status line and headers over httpcore2's 100 KiB)."""
    if "Receive buffer too long" in text:
        return "the status line and headers are longer than 100 KiB"
    return _BYTEARRAY.sub(lambda m: m.group(1)[1:], text)


def classify(exc: BaseException, url: str, secrets: tuple[str, ...] = ()) -> E.NetError:
    """The ``NetError`` for an exception from the stack, by what happened (see ``qcheck.net.errors`` kinds)."""
    chain = _chain(exc)
    text = _plain(f"{exc}") or type(exc).__name__
    if isinstance(exc, Malformed):
        kind = exc.kind
    elif isinstance(exc, ResolveFailed):
        kind = E.DNS
    elif any(isinstance(e, ConnectionRefusedError) for e in chain):
        kind = E.REFUSED
    elif isinstance(exc, _TIMEOUTS):
        kind = E.TIMEOUT
    elif any(isinstance(e, ssl.SSLCertVerificationError) for e in chain) or (
            isinstance(exc, _CONNECT) and any(isinstance(e, ssl.SSLError) for e in chain)):
        kind = E.TLS
    elif isinstance(exc, _LOCAL):
        kind = E.REQUEST
    elif isinstance(exc, _CONNECT):
        kind = E.CONNECT
    elif isinstance(exc, (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError)):
        closed = any(w in text.lower() for w in ("disconnected", "peer closed", "incomplete"))
        kind = E.CLOSED if closed else E.PROTOCOL
    else:
        kind, text = E.CLOSED, f"{type(exc).__name__}: {text}"
    return E.NetError(kind, text, url=url, secrets=secrets)
