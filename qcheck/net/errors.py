"""What can go wrong on the wire, as one-line errors that never show a secret.

``NetError`` carries a ``kind`` so callers word their own message (the Hub names the file and the setting to
raise; the eval endpoint client names the endpoint) without parsing text. ``redact`` is the one redactor every
message passes through.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from qcheck.errors import RemoteError

#: the host name did not resolve (never retried: waiting does not fix a typo or a missing network)
DNS = "dns"
#: nothing listens on the port
REFUSED = "refused"
#: another failure to connect (unreachable network, reset during the handshake)
CONNECT = "connect"
#: the TLS handshake failed (an untrusted certificate, a wrong host name)
TLS = "tls"
#: one read, write or connect waited longer than the per-operation timeout, or an attempt outlived its own limit
TIMEOUT = "timeout"
#: the connection closed before the answer was complete
CLOSED = "closed"
#: the answer is not HTTP: a malformed status line, header, length or chunk
PROTOCOL = "protocol"
#: the body's Content-Encoding is unknown or its compressed bytes are corrupt
ENCODING = "encoding"
#: too many redirects, or a redirect to something that is not http(s)
REDIRECT = "redirect"
#: the request could not be sent as asked (a header value with a line break, a URL that does not parse)
REQUEST = "request"
#: the caller's total deadline passed
DEADLINE = "deadline"

#: kinds worth another attempt (``REFUSED`` too when the client is told so: a server may be restarting)
TRANSIENT = frozenset({TIMEOUT, CLOSED, CONNECT})



def redact(text: str, *secrets: str | None) -> str:
    """``text`` without the given secrets, any bearer value, anything shaped like an HF or provider key
    (``hf_``, ``api_org_``, ``sk-``, ``gsk_``) and any URL's userinfo (``scheme://***@host``): qcheck's one
    masking function, ``qcheck.report.sanitize.mask``."""
    from qcheck.report.sanitize import mask

    return mask(text, *secrets)


def display_url(url: str) -> str:
    """``scheme://host[:port]/path`` of ``url``: no user, password, query or fragment (a signed URL's signature
    and any key in a query stay out of messages)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number: show the text before any query, redacted
        return redact(url.split("?", 1)[0].split("#", 1)[0])[:200]
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"[:200]


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (what messages name as the server)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return display_url(url)
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}"


class NetError(RemoteError):
    """A request that failed other than by an HTTP status, after every attempt it was worth: exit code 2.

    ``kind`` is one of this module's constants, ``detail`` the cause in a few words, ``url`` the request's URL as
    ``display_url`` shows it, ``attempts`` how many were made. The message is one redacted line.
    """

    def __init__(self, kind: str, detail: str, *, url: str = "", attempts: int = 1, secrets: tuple[str, ...] = ()):
        self.kind = kind
        self.detail = " ".join(redact(detail, *secrets).split())[:300]
        self.url = display_url(url) if url else ""
        self.attempts = attempts
        super().__init__(self._message())

    def _message(self) -> str:
        where = origin(self.url) if self.url else "the server"
        after = f" ({self.attempts} attempts)" if self.attempts > 1 else ""
        text = {
            DNS: f"cannot resolve the host of {where}: {self.detail}",
            REFUSED: f"cannot connect to {where}: connection refused",
            CONNECT: f"cannot connect to {where}: {self.detail}",
            TLS: f"TLS handshake with {where} failed: {self.detail}",
            TIMEOUT: f"timed out talking to {where}: {self.detail}",
            CLOSED: f"{where} closed the connection before the answer was complete: {self.detail}",
            PROTOCOL: f"{where} sent a malformed answer: {self.detail}",
            ENCODING: f"{where} sent a body qcheck cannot decode: {self.detail}",
            REDIRECT: f"{where}: {self.detail}",
            REQUEST: f"cannot send the request to {where}: {self.detail}",
            DEADLINE: f"gave up on {where}: {self.detail}",
        }.get(self.kind, f"{where}: {self.detail}")
        return redact(text + after)

    def with_attempts(self, attempts: int) -> NetError:
        """The same error, saying ``attempts`` attempts were made."""
        return NetError(self.kind, self.detail, url=self.url, attempts=attempts)
