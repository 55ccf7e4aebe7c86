"""Reading a response body without trusting its size: lengths checked, compressed bytes inflated within a bound.

A body is read until the caller's limit, then the connection is dropped: a server that answers a range request
with 200 and the whole 5 GB file costs the bytes asked for and one chunk more. Compressed bodies are inflated
by ``zlib`` with an output bound (``decompress(data, max_length)``), so a gzip bomb (1 MB that inflates to
1 GB) stops at the limit; codings qcheck did not ask for (``br``, ``zstd``, ``compress``, stacked codings)
are refused, since their decoders offer no such bound in every version.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable

#: a Content-Length above this is no real body (4 EiB): refused as malformed
MAX_CONTENT_LENGTH = 1 << 62
#: compressed bytes read beyond the limit on decoded bytes (headers of many gzip members, padding)
RAW_SLACK = 1 << 20
_LENGTH = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit also accepts '²'


class Malformed(Exception):
    """The framing of the answer is wrong (``kind`` protocol or encoding)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


def content_length(values: list[str]) -> int | None:
    """The body length the headers announce, or None; a value that is not ASCII digits, beyond any real body, or
    two that disagree, is ``Malformed``. (h11, under httpx2, refuses most of these first and merges equal
    duplicates, as RFC 9110 §8.6 allows.)"""
    seen = {v.strip() for v in values}
    if not seen:
        return None
    if len(seen) > 1:
        raise Malformed("protocol", f"conflicting Content-Length headers {sorted(seen)[:3]!r}"[:200])
    text = seen.pop()
    if not _LENGTH.fullmatch(text):
        raise Malformed("protocol", f"bad Content-Length {text[:40]!r}")
    value = int(text)
    if value > MAX_CONTENT_LENGTH:
        raise Malformed("protocol", f"Content-Length {text} is beyond any real body")
    return value


class _Inflater:
    """gzip or deflate (zlib-wrapped, or raw as some servers send it), inflated at most ``room`` bytes a call."""

    def __init__(self, coding: str):
        self.coding = coding
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        if self._z.eof:
            return self._next_member(data, room)
        try:
            out = self._z.decompress(self._z.unconsumed_tail + data, room)
        except zlib.error:
            if self.coding == "deflate" and not self._started:  # raw deflate, without the zlib wrapper
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                self._started = True
                return self.feed(data, room)
            raise Malformed("encoding", f"the {self.coding} body is corrupt") from None
        self._started = True
        if self._z.eof and self._z.unused_data:
            return out + self._next_member(self._z.unused_data, room - len(out))
        return out

    def _next_member(self, data: bytes, room: int) -> bytes:
        """Bytes after the end of a gzip member: another member (RFC 1952 allows several); ignored after deflate."""
        if self.coding != "gzip" or not data or room <= 0:
            return b""
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return self.feed(data, room)

    def finish(self, room: int) -> bytes:
        if not self._started:
            return b""
        if not self._z.eof and not self._z.unconsumed_tail:
            if self.coding == "deflate":  # some servers end a deflate stream without its final block
                return self._z.flush()[: max(room, 0)]
            raise Malformed("encoding", f"the {self.coding} body ended before its end marker")
        return b""


def inflater(header: str | None) -> _Inflater | None:
    """The decoder for a Content-Encoding header value (None: the bytes as sent); others are ``Malformed``."""
    codings = [c.strip().lower() for c in (header or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip", "deflate"):
        return _Inflater("deflate" if codings[0] == "deflate" else "gzip")
    raise Malformed("encoding", f"Content-Encoding {(header or '')[:60]!r} was not asked for (qcheck accepts gzip, "
                                "deflate or none)")


def read_bounded(chunks: Iterable[bytes], limit: int, coding: str | None,
                 received: Callable[[int], None] | None = None) -> tuple[bytes, bool]:
    """``(the first `limit` bytes of the decoded body, whether that is the whole body)``; reading stops as soon as
    more than ``limit`` decoded bytes exist (or far more compressed bytes than that arrived). ``received`` is told
    the size of every compressed chunk, and may raise to stop the read."""
    decoder = inflater(coding)
    out = bytearray()
    raw = 0
    for chunk in chunks:
        if received is not None:
            received(len(chunk))
        raw += len(chunk)
        out += chunk if decoder is None else decoder.feed(chunk, limit + 1 - len(out))
        if len(out) > limit or raw > limit + RAW_SLACK:
            return bytes(out[:limit]), False
    if decoder is not None:
        out += decoder.finish(limit + 1 - len(out))
    if len(out) > limit:
        return bytes(out[:limit]), False
    return bytes(out), True
