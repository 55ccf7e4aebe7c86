"""A bounded, buffered, sequential reader over a ``ByteSource``.

Header parsers (GGUF here, the Hub remote reader over HTTP range requests) read many small
little-endian fields in order. ``Cursor`` serves them from a buffer that it refills with
``read_at`` in chunks growing geometrically (64 KiB, 128 KiB, ... up to 4 MiB), so a local file costs
a handful of ``pread`` calls and a remote file a handful of range requests, whatever the header size.

Every read is checked before it happens: it may not go past the end of the file (when the size is
known) nor past ``start + max_bytes`` (the header budget, ``Limits.max_header_bytes``). A read that
cannot be satisfied raises ``InputError`` naming the byte offset and what was being read.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

from qcheck.errors import InputError
from qcheck.source import ByteSource

MIN_CHUNK = 64 * 1024
MAX_CHUNK = 4 * 1024 * 1024

_U8, _I8 = struct.Struct("<B"), struct.Struct("<b")
_U16, _I16 = struct.Struct("<H"), struct.Struct("<h")
_U32, _I32 = struct.Struct("<I"), struct.Struct("<i")
_U64, _I64 = struct.Struct("<Q"), struct.Struct("<q")
_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")
_BIG_ENDIAN = sys.byteorder != "little"


def _u64_views(buf: bytes) -> list[memoryview]:
    """``buf`` as native unsigned 64-bit integers at each of the 8 byte alignments: the u64 at offset ``p`` is
    ``views[p & 7][p >> 3]`` (an index past the end raises IndexError)."""
    whole = memoryview(buf)
    size = len(buf)
    return [whole[k:k + (size - k) // 8 * 8].cast("Q") for k in range(8)]


def _walk_buffer(views: list[memoryview], p: int, left: int) -> tuple[int, int]:
    """Step over up to ``left`` strings from buffer offset ``p`` (8-byte length, then the bytes) until the next
    length is not in the buffer; returns (offset reached, strings left). Eight steps per loop turn: the loop
    overhead is most of the cost of a step."""
    q = p
    try:
        while left >= 8:
            q = p
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            p += 8 + views[p & 7][p >> 3]
            left -= 8
    except IndexError:
        p = q  # part of the last turn ran: redo it one step at a time
    try:
        while left:
            p += 8 + views[p & 7][p >> 3]
            left -= 1
    except IndexError:
        pass
    return p, left


class Cursor:
    """Sequential little-endian reads from ``source``, starting at ``start``.

    ``max_bytes`` bounds how far past ``start`` the cursor may read (None: no bound beyond the file
    size). ``tell()`` is an absolute file offset. The cursor never reads more than one chunk ahead.
    """

    def __init__(
        self,
        source: ByteSource,
        start: int = 0,
        max_bytes: int | None = None,
        *,
        min_chunk: int | None = None,
        max_chunk: int | None = None,
        limit_name: str = "max_header_bytes",
    ):
        self.source = source
        self.size: int | None = source.size
        self.start = start
        self.max_bytes = max_bytes
        self.limit_name = limit_name
        self._buf = b""
        self._buf_start = start
        self._pos = start
        # module values read at call time, so tests can shrink them to exercise every buffer boundary
        self._chunk = max(1, MIN_CHUNK if min_chunk is None else min_chunk)
        self._max_chunk = max(self._chunk, MAX_CHUNK if max_chunk is None else max_chunk)
        #: bytes actually requested from the source (for tests and benchmarks)
        self.bytes_fetched = 0
        self.reads = 0
        end = None if max_bytes is None else start + max_bytes
        if self.size is not None:
            end = self.size if end is None else min(end, self.size)
        #: the first offset the cursor can never read (file end or budget end); None if unbounded
        self.hard_end: int | None = end

    # ----------------------------------------------------------------------------------- position
    def tell(self) -> int:
        """The absolute file offset of the next byte to be read."""
        return self._pos

    def remaining(self) -> int | None:
        """Bytes left in the file after ``tell()``, or None when the source size is unknown."""
        if self.size is None:
            return None
        return max(0, self.size - self._pos)

    def budget(self) -> int | None:
        """Bytes the cursor may still read: the smaller of the file rest and the header budget."""
        if self.hard_end is None:
            return None
        return max(0, self.hard_end - self._pos)

    def ensure_available(self, n: int, what: str, offset: int | None = None) -> None:
        """Raise InputError unless ``n`` more bytes from ``offset`` (default ``tell()``) can exist.

        Used to reject a declared count or length before looping over it.
        """
        at = self._pos if offset is None else offset
        if n < 0:
            raise InputError(f"{what} has a negative size ({n})", path=self.source.name, where=f"offset {at}")
        if self.size is not None and at + n > self.size:
            raise InputError(
                f"{what} needs {n} bytes but only {max(0, self.size - at)} remain: the file is truncated or corrupt",
                path=self.source.name, where=f"offset {at}")
        if self.max_bytes is not None and at + n > self.start + self.max_bytes:
            raise InputError(
                f"{what} needs {n} bytes, past the {self.max_bytes}-byte header limit "
                f"(raise it with --limit {self.limit_name}=N)",
                path=self.source.name, where=f"offset {at}")

    # ------------------------------------------------------------------------------------ buffering
    def _fill(self, n: int, what: str) -> None:
        """Make ``n`` bytes from ``self._pos`` available in the buffer, or raise."""
        self.ensure_available(n, what)
        pos = self._pos
        rel = pos - self._buf_start
        keep = self._buf[rel:] if 0 <= rel <= len(self._buf) else b""
        want = max(n - len(keep), self._chunk)
        if self._chunk < self._max_chunk:
            self._chunk = min(self._chunk * 2, self._max_chunk)
        read_from = pos + len(keep)
        if self.hard_end is not None:
            want = min(want, self.hard_end - read_from)
        data = self.source.read_at(read_from, want) if want > 0 else b""
        self.reads += 1
        self.bytes_fetched += len(data)
        self._buf = keep + data if keep else data
        self._buf_start = pos
        if len(self._buf) < n:
            raise InputError(
                f"{what} needs {n} bytes but the file ends after {len(self._buf)}: the file is truncated",
                path=self.source.name, where=f"offset {pos}")

    def read(self, n: int, what: str) -> bytes:
        """Exactly ``n`` bytes."""
        rel = self._pos - self._buf_start
        if rel < 0 or rel + n > len(self._buf):
            self._fill(n, what)
            rel = 0
        self._pos += n
        return self._buf[rel: rel + n]

    def _view(self, n: int, what: str) -> int:
        """Ensure ``n`` bytes are buffered at the position; return their index in the buffer and advance."""
        rel = self._pos - self._buf_start
        if rel < 0 or rel + n > len(self._buf):
            self._fill(n, what)
            rel = 0
        self._pos += n
        return rel

    def skip(self, n: int, what: str = "skipped bytes") -> None:
        """Move ``n`` bytes forward without reading them (checked against the file size and budget)."""
        self.ensure_available(n, what)
        self._pos += n

    def seek(self, offset: int) -> None:
        """Move to an absolute offset (forward or backward); the next read checks it."""
        if offset < 0:
            raise InputError(f"negative offset {offset}", path=self.source.name)
        self._pos = offset

    # ----------------------------------------------------------------------------------- primitives
    def _unpack(self, st: struct.Struct, what: str) -> Any:
        rel = self._view(st.size, what)  # may replace the buffer: call it first
        return st.unpack_from(self._buf, rel)[0]

    def u8(self, what: str = "u8") -> int:
        return self._unpack(_U8, what)

    def i8(self, what: str = "i8") -> int:
        return self._unpack(_I8, what)

    def u16(self, what: str = "u16") -> int:
        return self._unpack(_U16, what)

    def i16(self, what: str = "i16") -> int:
        return self._unpack(_I16, what)

    def u32(self, what: str = "u32") -> int:
        return self._unpack(_U32, what)

    def i32(self, what: str = "i32") -> int:
        return self._unpack(_I32, what)

    def u64(self, what: str = "u64") -> int:
        return self._unpack(_U64, what)

    def i64(self, what: str = "i64") -> int:
        return self._unpack(_I64, what)

    def f32(self, what: str = "f32") -> float:
        return self._unpack(_F32, what)

    def f64(self, what: str = "f64") -> float:
        return self._unpack(_F64, what)

    def bool(self, what: str = "bool") -> bool:
        """One byte that must be 0 or 1 (anything else is not a bool and is rejected)."""
        at = self._pos
        value = self.u8(what)
        if value > 1:
            raise InputError(f"{what} is {value}, not a bool (0 or 1)", path=self.source.name,
                             where=f"offset {at}")
        return value == 1

    def string_bytes(self, max_len: int, what: str) -> bytes:
        """A GGUF string: u64 length, then that many bytes. The length is checked before reading."""
        at = self._pos
        n = self.u64(f"length of {what}")
        if n > max_len:
            raise InputError(f"{what} declares {n} bytes, over the {max_len}-byte limit",
                             path=self.source.name, where=f"offset {at}")
        return self.read(n, what)

    def string(self, max_len: int, what: str) -> str:
        """A GGUF string decoded as UTF-8; invalid UTF-8 is an InputError naming the offset."""
        at = self._pos
        raw = self.string_bytes(max_len, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{what} is not valid UTF-8 (byte {exc.start} of {len(raw)})",
                             path=self.source.name, where=f"offset {at}") from None

    # ---------------------------------------------------------------------------------- bulk reads
    def skip_strings(self, count: int, max_len: int, what: str) -> None:
        """Skip ``count`` GGUF strings, validating every length, without building any of them.

        This is the hot path for vocabularies (128k-262k tokens, 280k-515k merges). A string array carries no
        byte size, so every length must be read; ``_walk_strings`` does that at C speed per step (memoryview
        indexing, no checks) and the result is then checked as a whole: if the walk ended inside the readable
        range and all the strings together hold at most ``max_len`` bytes, none of them is over ``max_len``.
        Anything else (a length past the file, the header budget or the limit) is walked again one checked
        element at a time, which names the offending element.
        """
        self.ensure_available(8 * count, f"{count} strings of {what}")
        start = self._pos
        end = self._walk_strings(count)
        hard_end = self.hard_end
        if end is not None and end - start - 8 * count <= max_len and (hard_end is None or end <= hard_end):
            self._pos = end
            if hard_end is None and count:
                # Unknown size: make sure the last string really exists before claiming success.
                self._pos = end - 1
                self.read(1, f"end of {what}")
            return
        self._pos = start
        self._skip_strings_checked(count, max_len, what)

    def _walk_strings(self, count: int) -> int | None:
        """The offset after ``count`` length-prefixed strings from ``tell()``, or None when a length field lies
        outside what may be read (the checked walk then says where). Lengths are not bounded here: a huge one
        moves the walk past the buffer and the readable range, which ends it."""
        if _BIG_ENDIAN:
            return None
        pos = self._pos
        left = count
        while left:
            rel = pos - self._buf_start
            if rel < 0 or rel + 8 > len(self._buf):
                if self.hard_end is not None and pos + 8 > self.hard_end:
                    return None
                self._pos = pos
                try:
                    self._fill(8, "string length")
                except InputError:
                    return None
                rel = 0
            rel, left = _walk_buffer(_u64_views(self._buf), rel, left)
            pos = self._buf_start + rel
        return pos

    def _skip_strings_checked(self, count: int, max_len: int, what: str) -> None:
        """``skip_strings`` one checked element at a time: the first bad length raises, naming its index."""
        hard_end = self.hard_end
        unpack = _U64.unpack_from
        pos = self._pos
        buf = self._buf
        base = self._buf_start
        blen = len(buf)
        for i in range(count):
            rel = pos - base
            if rel < 0 or rel + 8 > blen:
                self._pos = pos
                self._fill(8, f"length of {what}[{i}]")
                buf = self._buf
                base = self._buf_start
                blen = len(buf)
                rel = 0
            n = unpack(buf, rel)[0]
            if n > max_len:
                raise InputError(f"{what}[{i}] declares {n} bytes, over the {max_len}-byte limit",
                                 path=self.source.name, where=f"offset {pos}")
            pos += 8 + n
            if hard_end is not None and pos > hard_end:
                self._pos = pos - n
                self.ensure_available(n, f"{what}[{i}]")
        self._pos = pos
        if hard_end is None:
            # Unknown size: make sure the last string really exists before claiming success.
            if count:
                self._pos = pos - 1
                self.read(1, f"end of {what}")
        else:
            self.ensure_available(0, what)

    def read_strings(self, count: int, max_len: int, what: str) -> tuple[list[str], int]:
        """``count`` GGUF strings decoded as UTF-8; invalid bytes are replaced.

        Returns ``(strings, number_of_strings_with_invalid_utf8)`` so the caller can warn.
        """
        self.ensure_available(8 * count, f"{count} strings of {what}")
        out: list[str] = []
        bad = 0
        for i in range(count):
            raw = self.string_bytes(max_len, f"{what}[{i}]")
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                bad += 1
                out.append(raw.decode("utf-8", errors="replace"))
        return out, bad

    def read_array(self, fmt: str, count: int, what: str) -> list:
        """``count`` fixed-size little-endian values of struct format ``fmt`` (one letter)."""
        size = struct.calcsize("<" + fmt)
        self.ensure_available(size * count, what)
        out: list = []
        step = max(1, (1 << 20) // size)  # at most ~1 MiB per unpack
        done = 0
        while done < count:
            k = min(step, count - done)
            raw = self.read(k * size, what)
            out.extend(struct.unpack(f"<{k}{fmt}", raw))
            done += k
        return out
