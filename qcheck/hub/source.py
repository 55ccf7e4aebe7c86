"""``HubFileSource``: a ``ByteSource`` over HTTP range reads, so the local readers parse Hub files unchanged.

Read-ahead: the first read fetches 100 kB (``bytes=0-100000``, as ``huggingface_hub`` does for safetensors: "97% of
safetensors files have a metadata size < 100kb"). After that, a caller that already reads in chunks (64 KiB or
more: the GGUF reader's ``Cursor`` doubles its own chunks, the safetensors reader asks for the exact header
length) gets exactly the bytes it asks for, so read-ahead is not stacked on read-ahead; small reads get a
read-ahead that doubles on each sequential fetch, up to 16 MiB. A 10 MB GGUF header (128k-vocab tokenizer) costs
about 8 requests and at most about twice the bytes it needs; a safetensors header two requests at most.
Everything fetched counts toward ``Limits.max_header_bytes``: the source refuses to become a download.
"""

from __future__ import annotations

import re
import threading

from qcheck.errors import InputError, RemoteError
from qcheck.hub.http import HubClient, same_origin
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.net import Call

FIRST_READ = 100_001  # bytes=0-100000, huggingface_hub's parse_safetensors_file_metadata
GROWTH = 2
MAX_CHUNK = 16 * 1024 * 1024
#: reads at least this long are served exactly: the caller is doing its own chunking
CALLER_CHUNK = 64 * 1024
_CONTENT_RANGE = re.compile(r"^bytes\s+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)$")  # ASCII digits, as sent


class HubFileSource:
    """Random-access bytes of one file in a Hub repo at a fixed commit, fetched by ``Range`` GETs on demand."""

    def __init__(self, client: HubClient, *, repo_id: str, revision: str, filename: str, url: str,
                 size: int | None, limits: Limits = DEFAULT_LIMITS, display: str | None = None):
        self.client = client
        self.repo_id = repo_id
        self.revision = revision
        self.filename = filename
        self.url = url
        self.size = size
        self.limits = limits
        self.name = display or f"{repo_id}@{revision[:12]}:{filename}"
        self._data_url: str | None = None  # a CDN URL learnt from a redirect, reused without the token
        self._buf_start = 0
        self._buf = bytearray()
        self._next_chunk = FIRST_READ
        self._fetched = 0
        self._lock = threading.RLock()

    # -- ByteSource -------------------------------------------------------------------------------
    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"negative read at offset {offset}", path=self.name)
        budget = self.client.budget
        # a prefetching worker holds the lock while it reads: wait for it no longer than the run's deadline
        if not self._lock.acquire(timeout=max(0.0, budget.remaining())):
            raise budget.deadline_error(self.filename, self.repo_id, self.client.endpoint)
        try:
            return self._read_at(offset, length)
        finally:
            self._lock.release()

    def _read_at(self, offset: int, length: int) -> bytes:
        if self.size is not None:
            if offset >= self.size or length == 0:
                return b""
            length = min(length, self.size - offset)
        elif length == 0:
            return b""
        end = offset + length
        buf_end = self._buf_start + len(self._buf)
        if self._buf_start <= offset and end <= buf_end:
            return bytes(self._buf[offset - self._buf_start:end - self._buf_start])
        if self._buf_start <= offset <= buf_end and self._buf:
            missing = end - buf_end
            if length >= CALLER_CHUNK or missing > self._next_chunk:
                want = max(missing, CALLER_CHUNK)  # never a request for a few stray bytes
            else:
                want = self._next_chunk
                self._next_chunk = min(self._next_chunk * GROWTH, MAX_CHUNK)
            data = self._fetch(buf_end, buf_end + want)
            self._buf += data
        else:  # a fresh window (first read, or a jump away from what is buffered)
            want = max(length, FIRST_READ if offset == 0 else self._next_chunk)
            data = self._fetch(offset, offset + want)
            self._buf = bytearray(data)
            self._buf_start = offset
            if offset == 0:
                self._next_chunk = min(self._next_chunk * GROWTH, MAX_CHUNK)
        lo = offset - self._buf_start
        return bytes(self._buf[lo:lo + length])

    def close(self) -> None:
        """Keeps the fetched bytes: a FileSet hands out one source per file and readers may open it again."""

    def release(self) -> None:
        """Drop the buffered bytes."""
        with self._lock:
            self._buf = bytearray()
            self._buf_start = 0

    def __enter__(self) -> HubFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- prefetch hints ---------------------------------------------------------------------------
    @property
    def fetched_bytes(self) -> int:
        return self._fetched

    def prefetch(self) -> None:
        """Fetch the first chunk now (called from a thread pool so many shards load at once)."""
        self.read_at(0, 8)

    def prefetch_safetensors_header(self) -> None:
        """Fetch the whole safetensors header now: first chunk, then the rest if its length prefix asks for more."""
        head = self.read_at(0, 8)
        if len(head) < 8:
            return
        n = int.from_bytes(head, "little")
        if 0 < n <= min(self.limits.max_safetensors_header, self.limits.max_header_bytes):
            self.read_at(8, n)

    # -- HTTP ---------------------------------------------------------------------------------------
    def _fetch(self, start: int, end: int) -> bytes:
        if self.size is not None:
            end = min(end, self.size)
        if end <= start:
            return b""
        if self._fetched + (end - start) > self.limits.max_header_bytes:
            raise InputError(f"header reads would pass {self.limits.max_header_bytes} bytes "
                             "(limit max_header_bytes); refusing to download more", path=self.name)
        url, auth = (self._data_url, False) if self._data_url else (self.url, True)
        try:
            resp = self._range_get(url, start, end, auth)
        except RemoteError:
            if not self._data_url:
                raise
            self._data_url = None  # an expired signed URL: go back through the Hub once
            resp = self._range_get(self.url, start, end, True)
        data = self._check(resp, start, end)
        self._fetched += len(data)
        return data

    def _range_get(self, url: str, start: int, end: int, auth: bool):
        call = Call(max_bytes=end - start, headers={"Range": f"bytes={start}-{end - 1}"}, send_auth=auth,
                    identity=True)
        resp = self.client.request("GET", url, call, repo_id=self.repo_id, what=self.filename, revision=self.revision,
                                   raise_for_status=False)
        if resp.status >= 400 and resp.status != 416:
            raise self.client.status_error(resp.status, resp.headers, self.repo_id, self.filename, self.revision,
                                           resp.attempts)
        if not same_origin(resp.url, self.url) and self._data_url is None:
            self._data_url = resp.url
        return resp

    def _check(self, resp, start: int, end: int) -> bytes:
        if resp.status == 416:  # the range starts at or past the end: an empty read, as at end of file
            if self.size is None:
                m = re.match(r"^bytes\s+\*/([0-9]{1,19})$", resp.headers.get("content-range", "").strip())
                self.size = int(m.group(1)) if m else start
            return b""
        if resp.status == 206:
            m = _CONTENT_RANGE.match(resp.headers.get("content-range", "").strip())
            if not m or int(m.group(1)) != start:
                raise RemoteError(f"{self.name}: the server answered range {start}-{end - 1} with "
                                  f"Content-Range {resp.headers.get('content-range')!r}")
            if self.size is None and m.group(3) != "*":
                self.size = int(m.group(3))
        elif resp.status == 200:
            if start != 0:
                raise RemoteError(f"{self.name}: the server ignored the Range header (HTTP 200 for bytes "
                                  f"{start}-{end - 1}); it cannot be read without downloading it")
        else:
            raise RemoteError(f"{self.name}: unexpected HTTP {resp.status} for a range read")
        data = resp.body
        expected = end - start
        if self.size is not None and start + len(data) < min(end, self.size):
            raise RemoteError(f"{self.name}: short read at offset {start}: {len(data)} of {expected} bytes")
        return data[:expected]
