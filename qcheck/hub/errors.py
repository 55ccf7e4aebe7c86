"""Turn HTTP statuses and network failures into one-line ``RemoteError`` messages (exit code 2).

Every message says what failed and what to do about it, and passes through ``redact`` so a token can
never reach the terminal, even when a server echoes the Authorization header back in its error body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.errors import RemoteError
from qcheck.net import errors as net

if TYPE_CHECKING:
    from qcheck.net import NetError


class GatedRepoError(RemoteError):
    """The repo is gated (licence not accepted) or private, and the token does not grant access."""


class NotFoundError(RemoteError):
    """The repo, revision or file does not exist (or is private and no token was sent)."""


class RateLimitedError(RemoteError):
    """HTTP 429 after every retry."""


class NetworkError(RemoteError):
    """Timeout, refused connection, DNS failure, or a 5xx after every retry."""


def redact(text: str, token: str | None = None) -> str:
    """Remove a token (the given one, anything shaped like an HF or provider key, any bearer value, a password
    in a URL) from ``text``: ``qcheck.net.redact``."""
    return net.redact(text, token)


def offline_error(endpoint: str) -> RemoteError:
    """What a request says when ``HF_HUB_OFFLINE`` is set: nothing is sent."""
    return RemoteError(f"HF_HUB_OFFLINE is set, so qcheck does not contact {endpoint}; unset it to read the Hub "
                       "(only headers are read, by range requests)")


@dataclass(frozen=True)
class StatusReply:
    """What the Hub answered with a final error status: the status, its ``X-Error-Code`` and
    ``X-Error-Message`` headers, a ``Retry-After`` in seconds, and how many attempts were made."""

    status: int
    error_code: str | None = None
    server_message: str | None = None
    retry_after: float | None = None
    attempts: int = 1


def http_error(reply: StatusReply, *, repo_id: str, what: str, endpoint: str, token: str | None = None,
               had_token: bool = False, revision: str | None = None) -> RemoteError:
    """The RemoteError for a final (non-retried) HTTP error status on ``what`` (a file name or 'repo info')."""
    status, error_code, server_message = reply.status, reply.error_code, reply.server_message
    attempts, retry_after = reply.attempts, reply.retry_after
    page = f"{endpoint.rstrip('/')}/{repo_id}"
    detail = ""
    if server_message:
        detail = " (server said: " + " ".join(redact(server_message, token).split())[:200] + ")"
    if error_code == "GatedRepo" or (status == 403 and error_code != "RepoNotFound"):
        if error_code == "GatedRepo":
            msg = (f"{repo_id} is gated (HTTP {status}): accept the licence at {page} and set HF_TOKEN "
                   "(or run `hf auth login`)")
            if had_token:
                msg += "; the token sent was not granted access yet"
        else:
            msg = (f"access to {what} in {repo_id} denied (HTTP 403): the token lacks permission; check it at "
                   f"{endpoint.rstrip('/')}/settings/tokens and accept any licence at {page}")
        return GatedRepoError(redact(msg + detail, token))
    if error_code == "RevisionNotFound":
        return NotFoundError(redact(f"revision {revision!r} not found in {repo_id} (HTTP {status})", token))
    if error_code == "EntryNotFound" or (status == 404 and what != "repo info" and error_code != "RepoNotFound"):
        rev = f"@{revision}" if revision else ""
        return NotFoundError(redact(f"file {what!r} not found in {repo_id}{rev} (HTTP {status})", token))
    if status in (401, 404) or error_code == "RepoNotFound":
        hint = ("" if had_token else "; if it is private or gated, set HF_TOKEN or run `hf auth login`")
        return NotFoundError(redact(f"repository {repo_id} not found on {endpoint} (HTTP {status}){hint}", token))
    if status == 429:
        after = f"; the server asks to retry after {retry_after:g} s" if retry_after else ""
        return RateLimitedError(redact(f"rate limited by {endpoint} (HTTP 429) on {what} in {repo_id} after "
                                       f"{attempts} attempts{after}; wait and retry, or set HF_TOKEN for a higher "
                                       "limit", token))
    if status == 416:
        return RemoteError(redact(f"{what} in {repo_id}: the server refused the byte range (HTTP 416)", token))
    if status >= 500:
        return NetworkError(redact(f"{endpoint} failed with HTTP {status} on {what} in {repo_id} after {attempts} "
                                   f"attempts{detail}", token))
    return RemoteError(redact(f"{endpoint} answered HTTP {status} on {what} in {repo_id}{detail}", token))


def network_error(exc: NetError, *, repo_id: str, what: str, endpoint: str, timeout: float | None,
                  attempts: int, token: str | None = None) -> RemoteError:
    """The RemoteError for a transport failure (after retries), worded for the Hub by the failure's kind."""
    plural = "" if attempts == 1 else "s"
    if exc.kind == net.TIMEOUT:
        msg = (f"timed out after {timeout:g} s reading {what} from {endpoint} ({repo_id}), {attempts} attempts; "
               "raise it with QCHECK_HUB_TIMEOUT=SECONDS") if timeout else f"timed out reading {what} from {endpoint}"
    elif exc.kind == net.REFUSED:
        msg = (f"cannot connect to {endpoint}: connection refused ({attempts} attempt{plural}); "
               "check HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the local Hugging Face cache")
    elif exc.kind == net.DNS:
        msg = (f"cannot resolve the host of {endpoint} (no network?); set HF_HUB_OFFLINE=1 to use the local "
               "Hugging Face cache")
    elif exc.kind == net.TLS:
        msg = (f"cannot connect to {endpoint} securely: {exc.detail}; if a proxy or private CA signs its "
               "certificate, point SSL_CERT_FILE at that CA")
    else:  # closed mid-answer, malformed, undecodable, a redirect loop: qcheck.net's own words, with the file
        msg = f"reading {what} in {repo_id}: {exc}"
    return NetworkError(redact(" ".join(msg.split()), token))
