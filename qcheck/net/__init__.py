"""qcheck's one HTTP stack: every request qcheck makes (Hub reads, eval endpoints, ``qcheck probe``) goes through here.

Built on httpx2 (the client huggingface_hub 2.x uses) and its connection pools (httpcore2), with what a tool that
talks to arbitrary servers needs on top, in one place:

* **retries** on 408/429/5xx (``Call.retry_statuses``) and on transient transport failures, waiting what
  ``Retry-After`` asks in every form it comes in (delta-seconds, fractions, HTTP-dates, the Hub's
  ``RateLimit: "api";r=0;t=N``; garbage, negative values and dates in the past are not waits), else an
  exponential backoff (optionally jittered); a wait longer than ``Settings.max_wait`` or than the time left is
  never slept: the answer comes back at once with ``wait_refused`` set;
* **one deadline** per logical request (``Watch.remaining()``, e.g. a run's total network time) and optionally
  per attempt (``Settings.attempt_limit``), covering name resolution (on a helper thread the caller stops
  waiting for), connect, TLS, every read and write, redirects, retries and waits: a server that drips one byte
  at a time, in its status line or its body, ends at the deadline;
* **bounded bodies**: at most ``Call.max_bytes`` decoded bytes are kept, then the connection is dropped (a 200
  answering a range request with a 5 GB file costs the bytes asked for); Content-Length must be ASCII digits
  and at most 2**62, two that disagree are refused; gzip/deflate are inflated with an output bound (no
  decompression bomb), other codings are refused; error bodies are kept up to ``Call.error_bytes``;
* **redirects** followed by qcheck, not httpx: at most ``Settings.max_redirects`` (a loop ends in one line),
  303 turns a GET/POST into GET but a HEAD stays HEAD, a redirect's own body is never read into anything,
  the request body is resent only on 307/308, and ``Authorization`` (and ``Cookie``) never go to another origin;
* **proxies** from the environment as httpx reads them (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) and
  certificates from ``SSL_CERT_FILE``/``SSL_CERT_DIR``;
* **one-line errors**: ``NetError`` (a ``RemoteError``, exit code 2) with a ``kind`` (``dns``, ``refused``,
  ``connect``, ``tls``, ``timeout``, ``closed``, ``protocol``, ``encoding``, ``redirect``, ``request``,
  ``deadline``) and a message that passed through ``redact`` (the client's secrets, bearer values, ``hf_``,
  ``api_org_``, ``sk-``, ``gsk_`` keys, URL passwords; URLs shown without their query).

API::

    from qcheck.net import Call, Client, Settings, Watch

    client = Client(Settings(timeout=10, retries=3, backoff=0.5, max_wait=30, attempt_limit=None,
                             jitter=0.0, retry_refused=False, max_redirects=20),
                    headers={"Authorization": f"Bearer {key}", "User-Agent": "qcheck/0.1"}, secrets=(key,))
    resp = client.request("GET", url, Call(max_bytes=1 << 20, headers={"Range": "bytes=0-99"}, identity=True))
    resp.status, resp.headers["content-type"], resp.body, resp.complete, resp.url, resp.attempts
    client.request("POST", url, Call(max_bytes=64 << 20, body=b"{...}", headers={"Content-Type": "application/json"}))
    client.close()

``Call(max_bytes, headers={}, params=None, body=None, send_auth=True, retry_statuses=RETRY_STATUSES,
identity=False, error_bytes=65536)``. ``request`` returns the final ``Response`` whatever its status (the
caller words 4xx/5xx in its own terms), raises ``NetError`` when no answer came after the retries, and raises
what the ``Watch`` raises: subclass ``Watch`` for a deadline (``remaining``/``expired``), a byte budget
(``received``), a run-wide stop (``stopped``), counters (``attempt``, ``failed``) and retry notices
(``retrying``). ``Client`` is thread-safe and keeps connections alive across requests and threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qcheck.net.errors import NetError, display_url, origin, redact
from qcheck.net.retry import parse_retry_after, retry_after

if TYPE_CHECKING:
    from qcheck.net.client import RETRY_STATUSES, Call, Client, Response, Settings, Watch

_CLIENT = ("RETRY_STATUSES", "Call", "Client", "Response", "Settings", "Watch")


def __getattr__(name: str) -> Any:
    """The client's names, imported on first use: ``qcheck.net.errors`` (the redactor) must not cost an httpx2
    import to ``qcheck inspect`` of a local file."""
    if name in _CLIENT:
        from qcheck.net import client

        return getattr(client, name)
    raise AttributeError(f"module 'qcheck.net' has no attribute {name!r}")


__all__ = ["RETRY_STATUSES", "Call", "Client", "NetError", "Response", "Settings", "Watch", "display_url", "origin",
           "parse_retry_after", "redact", "retry_after"]
