"""A GGUF header read once is kept for the next run over the same local file, and used only for the same bytes.

Walking a vocabulary's string lengths (128k tokens and 280k merges in a Llama 3 file, 262k tokens in Gemma's) is
most of the time of reading a GGUF header, and cannot be avoided: a string array does not say how many bytes it
holds. ``inspect`` and ``check`` run again and again on the same file (a pre-commit hook, a CI gate, trying engines
one after the other), so a header read successfully is kept in the data cache (``qcheck.datacache``) as plain JSON:

- it is found by the file size, the limits, the reader (its source and the tensor-type table it used) and the
  SHA-256 of the file's first 64 KiB;
- it is used only when the SHA-256 of all ``header_bytes`` of the file, read now, equals the digest it was made
  from: a changed byte anywhere in the header is a miss, and the file is parsed again. The digest is skipped
  (hashing a 10 MB vocabulary was a tenth of a ``check``) only when the open file's identity (size, modification
  and change times in nanoseconds, inode, device) is the one recorded with the entry and both times are more
  than ``RACY_NS`` older than the entry: any write moves the change time, which no user can set back, and a
  file written within a clock tick of its entry is always hashed (git's rule for a "racy" index entry);
- every field is type-checked when read back (anything else is a miss);
- only headers the parser accepted are kept: a hostile file is refused by the parser on every run.

Tensor data is not covered by the digest, and qcheck never reads it anyway. Headers read over HTTP (the Hub) and
headers of more than ``MAX_TENSORS`` tensors (whose JSON costs as much as their parse) are not kept.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from qcheck.limits import Limits
from qcheck.model import TensorInfo
from qcheck.readers.gguf_records import MAX_ALIGNMENT, ArraySummary, GGUFHeader
from qcheck.source import ByteSource, LocalFileSource

KIND = "gguf-header"
PROBE_BYTES = 64 * 1024
MAX_TENSORS = 20_000
_SCALARS = (bool, int, float, str)
_CHUNK = 4 * 1024 * 1024
_reader_id: str | None = None
#: a file changed less than this before its entry was written is always hashed (coarse file-system clocks)
RACY_NS = 2_000_000_000


def read_cached(source: ByteSource, limits: Limits, parse: Callable[[], GGUFHeader]) -> GGUFHeader:
    """The header of ``source``: from the cache when its bytes are those a kept header was read from, else
    ``parse()`` (kept for next time when it succeeds)."""
    from qcheck import datacache

    if not isinstance(source, LocalFileSource) or source.size is None or datacache.cache_dir() is None:
        return parse()
    key = datacache.key_of(KIND, _locator(source, limits))
    entry = datacache.load(KIND, key)
    header = _decode(entry, source, limits)
    if header is None:
        header = parse()
        fresh = _encode(header, source) if len(header.tensors) <= MAX_TENSORS else None
        if fresh is not None:
            datacache.store(KIND, key, fresh)
    elif isinstance(entry, dict) and not _known(entry, source) and _settled(source):  # hashed this time; recorded, the next run need not
        datacache.store(KIND, key, {**entry, "identity": list(source.identity() or ()), "stored_ns": time.time_ns()})
    return header


def _settled(source: LocalFileSource) -> bool:
    """True when the file was last changed more than ``RACY_NS`` ago (its identity can stand for its bytes)."""
    ident = source.identity()
    return ident is not None and time.time_ns() - max(ident[1], ident[2]) > RACY_NS


def _known(entry: Any, source: ByteSource) -> bool:
    """True when the file is the very one the entry's digest was checked on, untouched since: same identity,
    changed more than ``RACY_NS`` before the entry was written."""
    if not isinstance(entry, dict) or not isinstance(source, LocalFileSource):
        return False
    ident, stored = entry.get("identity"), entry.get("stored_ns")
    if type(stored) is not int or not isinstance(ident, list) or any(type(x) is not int for x in ident):
        return False
    now = source.identity()
    return now is not None and list(now) == ident and stored - max(now[1], now[2]) > RACY_NS


def _locator(source: ByteSource, limits: Limits) -> bytes:
    """What finds an entry (the digest of the whole header then decides whether it is used)."""
    assert source.size is not None
    head = source.read_at(0, min(PROBE_BYTES, source.size))
    meta = json.dumps([_reader(), source.size, asdict(limits)], sort_keys=True)
    return meta.encode() + b"\0" + head


def _reader() -> str:
    """The reader's identity: its source files and the tensor-type table it sizes tensors with (an upgrade of
    qcheck or of gguf-py is a new key)."""
    global _reader_id
    if _reader_id is None:
        from qcheck.readers import gguf_tables

        h = hashlib.sha256()
        for name in ("gguf.py", "gguf_records.py", "binary.py", "gguf_tables.py", "gguf_cache.py"):
            h.update(Path(__file__).with_name(name).read_bytes())
        h.update(repr((sorted(gguf_tables.TENSOR_TYPES.items()), sorted(gguf_tables.VALUE_TYPES.items()))).encode())
        _reader_id = h.hexdigest()
    return _reader_id


def _digest(source: ByteSource, n: int) -> str | None:
    """SHA-256 of the file's first ``n`` bytes, read in bounded chunks (None if the file is shorter now)."""
    h = hashlib.sha256()
    done = 0
    while done < n:
        data = source.read_at(done, min(_CHUNK, n - done))
        if not data:
            return None
        h.update(data)
        done += len(data)
    return h.hexdigest()


def _encode(header: GGUFHeader, source: ByteSource) -> dict[str, Any] | None:
    digest = _digest(source, header.header_bytes)
    if digest is None:
        return None

    def value(v: Any) -> Any:
        if isinstance(v, ArraySummary):
            return {"array_of": v.element_type, "count": v.count, "offset": v.offset}
        return [value(x) for x in v] if isinstance(v, list) else v

    ident = source.identity() if isinstance(source, LocalFileSource) else None
    return {"sha256": digest, "identity": list(ident) if ident else None, "stored_ns": time.time_ns(),
            "version": header.version, "alignment": header.alignment,
            "data_offset": header.data_offset, "header_bytes": header.header_bytes,
            "metadata": {k: value(v) for k, v in header.metadata.items()}, "value_types": header.value_types,
            "warnings": header.warnings,
            "tensors": [[t.name, t.dtype, list(t.shape), t.nbytes, t.offset] for t in header.tensors]}


def _decode(entry: Any, source: ByteSource, limits: Limits) -> GGUFHeader | None:
    """The kept header, if ``entry`` is well formed, holds only what the reader itself would accept (checked again
    here as strictly as a header: an entry is data from a file, even behind its tag), and the file's header bytes
    are still the ones it was read from; else None."""
    if not isinstance(entry, dict):
        return None
    n = entry.get("header_bytes")
    if type(n) is not int or not 0 < n <= min(limits.max_header_bytes, source.size or 0):
        return None
    try:
        version, alignment, data_offset = (_int(entry.get(k)) for k in ("version", "alignment", "data_offset"))
        if version not in (1, 2, 3) or not 0 < alignment <= MAX_ALIGNMENT or alignment & (alignment - 1) \
                or data_offset != n + (alignment - n % alignment) % alignment:
            raise ValueError("header fields")
        raw_meta = _dict(entry.get("metadata"))
        value_types = {k: _str(v) for k, v in _dict(entry.get("value_types")).items()}
        if len(raw_meta) > limits.max_kv or len(value_types) > limits.max_kv:
            raise ValueError("too many keys")
        metadata = {_str(k): _value(v, limits, 0) for k, v in raw_meta.items()}
        tensors = _tensors(_list(entry.get("tensors")), limits, data_offset, alignment, source.size or 0)
        warnings = [_str(w) for w in _list(entry.get("warnings"))[:10_000]]
    except (TypeError, ValueError, RecursionError):
        return None
    if not _known(entry, source) and entry.get("sha256") != _digest(source, n):
        return None
    return GGUFHeader(version=version, metadata=metadata, tensors=tensors, alignment=alignment,
                      data_offset=data_offset, header_bytes=n, file_size=source.size, warnings=warnings,
                      value_types=value_types)


def _value(v: Any, limits: Limits, depth: int) -> Any:
    """A metadata value as the reader keeps it: a scalar within GGUF's ranges, a list (nested at most
    ``max_nesting``), or an array summary."""
    if type(v) is bool or type(v) is float:
        return v
    if type(v) is int:
        if not -(2**63) <= v < 2**64:
            raise ValueError("integer out of GGUF's range")
        return v
    if type(v) is str:
        if len(v) > limits.max_string_bytes:
            raise ValueError("string too long")
        return v
    if depth >= limits.max_nesting:
        raise ValueError("nested too deep")
    if type(v) is list:
        if len(v) > limits.max_array_elements:
            raise ValueError("array too long")
        return [_value(x, limits, depth + 1) for x in v]
    if type(v) is dict and set(v) == {"array_of", "count", "offset"}:
        count, offset = _int(v["count"]), _int(v["offset"])
        if not 0 <= count <= limits.max_array_elements or offset < 0:
            raise ValueError("array summary out of range")
        return ArraySummary(_str(v["array_of"]), count, offset)
    raise TypeError("not a GGUF metadata value")


def _tensors(rows: list[Any], limits: Limits, data_offset: int, alignment: int, size: int) -> list[TensorInfo]:
    """The tensor table, re-checked as the reader checks it: unique names of ggml's length, 0 to ``max_dims``
    positive dimensions whose product is within ``max_tensor_elements``, the byte size ggml's type table gives,
    aligned and contiguous offsets inside the file."""
    from qcheck.readers import gguf_tables as tables

    if len(rows) > min(MAX_TENSORS, limits.max_tensors):
        raise ValueError("too many tensors")
    sizes = {name: (block, type_size) for name, block, type_size in tables.TENSOR_TYPES.values()}
    out: list[TensorInfo] = []
    seen: set[str] = set()
    expected = data_offset
    after_unknown: int | None = None  # the previous tensor's offset when its size is unknown
    for row in rows:
        name, dtype, shape, nbytes, offset = _list(row)
        name, dtype = _str(name), _str(dtype)
        dims = [_int(d) for d in _list(shape)]
        if name in seen or len(name.encode("utf-8", "surrogatepass")) >= tables.GGML_MAX_NAME \
                or len(dims) > min(tables.GGML_MAX_DIMS, limits.max_dims):
            raise ValueError("tensor name or rank")
        seen.add(name)
        numel = 1
        for d in dims:
            if not 0 < d < 2**63:
                raise ValueError("dimension")
            numel *= d
        if numel > limits.max_tensor_elements:
            raise ValueError("elements")
        block_size = sizes.get(dtype)
        if block_size is None:
            if nbytes is not None:
                raise ValueError("a size for a type of unknown size")
        else:
            block, type_size = block_size
            if (dims and dims[-1] % block) or (not dims and block != 1) or _int(nbytes) != numel // block * type_size:
                raise ValueError("byte size")
        offset = _int(offset)
        if offset < data_offset or (offset - data_offset) % alignment or offset + (nbytes or 1) > size:
            raise ValueError("offset")
        if (offset <= after_unknown) if after_unknown is not None else offset != expected:
            raise ValueError("not contiguous")
        if nbytes is None:
            after_unknown = offset
        else:
            expected, after_unknown = offset + nbytes + (alignment - nbytes % alignment) % alignment, None
        out.append(TensorInfo(name=name, dtype=dtype, shape=tuple(dims), nbytes=nbytes, offset=offset))
    return out


def _int(v: Any) -> int:
    if type(v) is not int:
        raise TypeError("not an integer")
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise TypeError("not a string")
    return v


def _list(v: Any) -> list[Any]:
    if type(v) is not list:
        raise TypeError("not a list")
    return v


def _dict(v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise TypeError("not a table")
    return v
