"""A bounded, streaming GGUF header reader (v2 and v3, little-endian).

It reads the KV metadata and the tensor infos and never touches tensor data, so it works on a
header-only download and over HTTP range reads (see ``qcheck.readers.binary.Cursor``). gguf-py's
``GGUFReader`` is not used: it memory-maps the whole file, trusts the counts in it, builds numpy
views of every tensor and fails on tensor types newer than the installed package
(docs/research/formats.md §5.6).

Every count, length, dimension and offset is checked before use, following ggml's own loader
(``ggml/src/gguf.cpp``) and the hostile-file checklist in docs/research/peers.md §3.6. Bad input raises
``InputError`` naming the byte offset, key or tensor. Large metadata arrays (tokens, merges, scores)
are skipped, their string lengths still validated, and kept as ``ArraySummary`` unless the caller
asks for them by name.

Public: ``read_gguf_header``, ``read_gguf_file``, ``load_gguf``, ``GGUFHeader``, ``ArraySummary`` (defined in
``qcheck.readers.gguf_records``), ``split_info``. The model keys (``{arch}.block_count`` ...) are read through ``qcheck.readers.gguf_meta``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Checkpoint, SourceFile, TensorInfo
from qcheck.readers import gguf_tables as tables
from qcheck.readers.binary import Cursor
from qcheck.readers.gguf_records import MAX_ALIGNMENT, ArraySummary, GGUFHeader
from qcheck.source import ByteSource, FileSet, LocalFileSource

#: arrays with at most this many elements are kept as lists; longer ones become ArraySummary
SMALL_ARRAY_MAX = 1024
#: elements kept as lists over a whole file (a Python int in a list costs ~36 bytes): past this, small arrays
#: become ArraySummary too, so 100k arrays of 1,024 elements cannot take gigabytes (real files keep < 10k)
KEPT_ELEMENTS_MAX = 262_144
#: smallest possible encodings, used to reject counts that cannot fit in the bytes that remain:
#: a KV is key length (8) + a non-empty key (1) + value type (4) + the smallest value (1);
#: a tensor info is name length (8) + n_dims (4) + type (4) + offset (8).
MIN_KV_BYTES = 14
MIN_TENSOR_INFO_BYTES = 24
#: elements and byte offsets must stay representable as int64, as in ggml
INT64_LIMIT = 2**63

#: ``<prefix>-00001-of-00003.gguf`` (llama.cpp split naming; huggingface.js RE_GGUF_SHARD_FILE)
SPLIT_RE = re.compile(r"^(?P<prefix>.*?)-(?P<shard>\d{5})-of-(?P<total>\d{5})\.gguf$")

_LEGACY_MAGICS = {b"lmgg": "GGML", b"fmgg": "GGMF", b"tjgg": "GGJT"}

# keys whose value type is fixed by llama.cpp: a wrong type is the typed-consumer confusion bug class
_STRING_KEYS = ("general.architecture",)
_INT_KEYS = ("general.file_type", "general.quantization_version", "split.no", "split.count",
             "split.tensors.count")
_ARRAY_KEYS = {
    "tokenizer.ggml.tokens": "STRING",
    "tokenizer.ggml.merges": "STRING",
    "tokenizer.ggml.scores": "FLOAT32",
    "tokenizer.ggml.token_type": "INT32",
}
_ARCH_INT_KEYS = ("context_length", "embedding_length", "block_count", "vocab_size")
_INT_TYPE_NAMES = frozenset(("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"))


def read_gguf_header(
    source: ByteSource,
    limits: Limits = DEFAULT_LIMITS,
    materialize: tuple[str, ...] = (),
) -> GGUFHeader:
    """Parse the header of one GGUF file from ``source`` (bounded, streaming, header only).

    ``materialize`` names metadata arrays to return as lists whatever their size
    (e.g. ``("tokenizer.ggml.tokens",)``); they are still bounded by ``limits``.
    """
    return _Parser(source, limits, materialize).parse()


def read_gguf_file(path: str | os.PathLike[str], limits: Limits = DEFAULT_LIMITS,
                   materialize: tuple[str, ...] = ()) -> GGUFHeader:
    """``read_gguf_header`` on a local file path."""
    with LocalFileSource(path) as src:
        return read_gguf_header(src, limits, materialize)


class _Parser:
    def __init__(self, source: ByteSource, limits: Limits, materialize: tuple[str, ...]):
        self.source = source
        self.limits = limits
        self.materialize = frozenset(materialize)
        self.cur = Cursor(source, 0, limits.max_header_bytes)
        self.path = source.name
        self.warnings: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, str] = {}
        self.kept_elements = 0  # elements of "auto" arrays kept as lists so far (KEPT_ELEMENTS_MAX)

    def fail(self, message: str, where: str) -> InputError:
        return InputError(message, path=self.path, where=where)

    # ------------------------------------------------------------------------------------ header
    def parse(self) -> GGUFHeader:
        cur = self.cur
        if self.source.size == 0:
            raise InputError("the file is empty, not a GGUF file", path=self.path)
        magic = cur.read(4, "GGUF magic")
        if magic != b"GGUF":
            self._bad_magic(magic)
        version = cur.u32("GGUF version")
        self._check_version(version)
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata key/value count")
        if n_tensors > self.limits.max_tensors:
            raise self.fail(f"tensor count {n_tensors} is over the limit of {self.limits.max_tensors} "
                            "(raise it with --limit max_tensors=N)", "offset 8")
        if n_kv > self.limits.max_kv:
            raise self.fail(f"metadata key/value count {n_kv} is over the limit of {self.limits.max_kv} "
                            "(raise it with --limit max_kv=N)", "offset 16")
        cur.ensure_available(n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_INFO_BYTES,
                             f"{n_kv} metadata entries and {n_tensors} tensor infos")

        for i in range(n_kv):
            self._read_kv(i)
        self._check_known_keys()
        alignment = self._alignment()

        records = [self._read_tensor_info(i) for i in range(n_tensors)]
        header_bytes = cur.tell()
        data_offset = _align(header_bytes, alignment)
        tensors = self._place_tensors(records, data_offset, alignment)
        return GGUFHeader(
            version=version, metadata=self.metadata, tensors=tensors, alignment=alignment,
            data_offset=data_offset, header_bytes=header_bytes, file_size=self.source.size,
            warnings=self.warnings, value_types=self.value_types,
        )

    def _bad_magic(self, magic: bytes) -> None:
        if magic == b"FUGG":
            raise self.fail("big-endian GGUF is not supported (magic 'FUGG'); qcheck reads little-endian "
                            "GGUF, as llama.cpp does on every common platform", "offset 0")
        if magic in _LEGACY_MAGICS:
            raise self.fail(f"this is a pre-GGUF {_LEGACY_MAGICS[magic]} file; convert it to GGUF with "
                            "llama.cpp", "offset 0")
        shown = magic.hex(" ")
        raise self.fail(f"not a GGUF file: it starts with bytes {shown}, expected 'GGUF' (47 47 55 46)",
                        "offset 0")

    def _check_version(self, version: int) -> None:
        if version == 0:
            raise self.fail("invalid GGUF version 0", "offset 4")
        if version & 0xFFFF == 0:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            raise self.fail(f"GGUF version reads as {version:#010x} (version {swapped} byte-swapped): this is "
                            "a big-endian GGUF, which qcheck does not read", "offset 4")
        if version == 1:
            raise self.fail("GGUF v1 is not supported (pre-2023 format); convert with llama.cpp", "offset 4")
        if version > tables.GGUF_VERSION:
            raise self.fail(f"GGUF version {version} is newer than the versions qcheck reads (2 and 3)",
                            "offset 4")

    # --------------------------------------------------------------------------------- metadata
    def _read_kv(self, index: int) -> None:
        cur = self.cur
        at = cur.tell()
        raw = cur.string_bytes(self.limits.max_string_bytes, f"key of metadata entry {index}")
        if not raw:
            raise self.fail(f"metadata entry {index} has an empty key", f"offset {at}")
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"key of metadata entry {index} is not valid UTF-8", f"offset {at}") from None
        if key in self.metadata:
            raise self.fail(f"duplicate metadata key {key!r} (entry {index})", f"offset {at}")
        type_at = cur.tell()
        vtype = cur.u32(f"value type of {key!r}")
        if vtype not in tables.VALUE_TYPES:
            raise self.fail(f"key {key!r} has unknown value type {vtype}; the rest of the file cannot be "
                            "followed", f"offset {type_at}")
        if vtype == tables.VT_ARRAY:
            mode = "all" if key in self.materialize else "auto"
            value, type_name = self._array(key, 1, mode)
        else:
            value = self._scalar(vtype, key)
            type_name = tables.VALUE_TYPES[vtype][0]
        self.metadata[key] = value
        self.value_types[key] = type_name

    def _scalar(self, vtype: int, key: str) -> Any:
        cur = self.cur
        what = f"value of {key!r}"
        if vtype == tables.VT_STRING:
            return cur.string(self.limits.max_string_bytes, what)
        name = tables.VALUE_TYPES[vtype][0]
        if name == "BOOL":
            return cur.bool(what)
        return getattr(cur, _SCALAR_METHODS[name])(what)

    def _array(self, key: str, depth: int, mode: str) -> tuple[Any, str]:
        """Read or skip one array. ``mode``: "all" (materialise), "auto" (small ones), "skip"."""
        cur = self.cur
        at = cur.tell()
        if depth > self.limits.max_nesting:
            raise self.fail(f"array {key!r} is nested {depth} deep, over the limit of "
                            f"{self.limits.max_nesting} (raise it with --limit max_nesting=N)", f"offset {at}")
        etype = cur.u32(f"element type of array {key!r}")
        count_at = cur.tell()
        count = cur.u64(f"length of array {key!r}")
        if etype not in tables.VALUE_TYPES:
            raise self.fail(f"array {key!r} has unknown element type {etype}; the rest of the file cannot be "
                            "followed", f"offset {at}")
        ename, fmt, size = tables.VALUE_TYPES[etype]
        if count > self.limits.max_array_elements:
            raise self.fail(f"array {key!r} declares {count} elements, over the limit of "
                            f"{self.limits.max_array_elements} (raise it with --limit max_array_elements=N)",
                            f"offset {count_at}")
        first = cur.tell()
        min_size = size if size is not None else (8 if etype == tables.VT_STRING else 12)
        cur.ensure_available(count * min_size, f"array {key!r} of {count} {ename} elements")
        type_name = f"ARRAY[{ename}]"
        keep = mode == "all" or (mode == "auto" and count <= SMALL_ARRAY_MAX and etype != tables.VT_ARRAY
                                 and self.kept_elements + count <= KEPT_ELEMENTS_MAX)
        if keep and mode == "auto":
            self.kept_elements += count
        what = f"array {key!r}"
        if fmt is not None:
            if not keep:
                cur.skip(count * min_size, what)  # min_size is the fixed element size here
                return ArraySummary(ename, count, first), type_name
            if ename == "BOOL":
                values = cur.read_array("B", count, what)
                for i, v in enumerate(values):
                    if v > 1:
                        raise self.fail(f"{what}[{i}] is {v}, not a bool (0 or 1)", f"offset {first + i}")
                return [v == 1 for v in values], type_name
            return cur.read_array(fmt, count, what), type_name
        if etype == tables.VT_STRING:
            if not keep:
                cur.skip_strings(count, self.limits.max_string_bytes, what)
                return ArraySummary(ename, count, first), type_name
            strings, bad = cur.read_strings(count, self.limits.max_string_bytes, what)
            if bad:
                self.warnings.append(f"{what}: {bad} of {count} strings are not valid UTF-8 "
                                     "(shown with replacement characters)")
            return strings, type_name
        # arrays of arrays: no writer in the wild produces them; validate and skip unless asked for
        if keep:
            return [self._array(key, depth + 1, "all")[0] for _ in range(count)], type_name
        for _ in range(count):
            self._array(key, depth + 1, "skip")
        return ArraySummary(ename, count, first), type_name

    def _check_known_keys(self) -> None:
        md, types = self.metadata, self.value_types
        for key in _STRING_KEYS:
            if key in md and types[key] != "STRING":
                raise self.fail(f"must be a STRING, not {types[key]}", f"key {key!r}")
        arch = md.get("general.architecture")
        int_keys = list(_INT_KEYS)
        if isinstance(arch, str):
            int_keys += [f"{arch}.{suffix}" for suffix in _ARCH_INT_KEYS]
        for key in int_keys:
            if key not in md:
                continue
            if types[key] not in _INT_TYPE_NAMES:
                raise self.fail(f"must be an integer, not {types[key]}", f"key {key!r}")
            if md[key] < 0:
                raise self.fail(f"must not be negative ({md[key]})", f"key {key!r}")
        for key, elem in _ARRAY_KEYS.items():
            if key in md and types[key] != f"ARRAY[{elem}]":
                raise self.fail(f"must be an ARRAY[{elem}], not {types[key]}", f"key {key!r}")
        n_tokens = _array_len(md.get("tokenizer.ggml.tokens"))
        if n_tokens is not None:
            for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
                n = _array_len(md.get(key))
                if n is not None and n != n_tokens:
                    raise self.fail(f"has {n} entries but tokenizer.ggml.tokens has {n_tokens}", f"key {key!r}")

    def _alignment(self) -> int:
        key = "general.alignment"
        if key not in self.metadata:
            return tables.GGUF_DEFAULT_ALIGNMENT
        if self.value_types[key] != "UINT32":
            raise self.fail(f"must be a UINT32, not {self.value_types[key]}", f"key {key!r}")
        value = self.metadata[key]
        if value == 0 or value & (value - 1):
            raise self.fail(f"alignment {value} is not a non-zero power of two", f"key {key!r}")
        if value > MAX_ALIGNMENT:
            raise self.fail(f"alignment {value} is implausibly large (qcheck accepts up to {MAX_ALIGNMENT})",
                            f"key {key!r}")
        return value

    # ------------------------------------------------------------------------------ tensor infos
    def _read_tensor_info(self, index: int) -> tuple[str, int, list[int], int, int | None, int, int]:
        cur = self.cur
        at = cur.tell()
        raw = cur.string_bytes(self.limits.max_string_bytes, f"name of tensor {index}")
        if len(raw) >= tables.GGML_MAX_NAME:
            raise self.fail(f"tensor {index} has a {len(raw)}-byte name; ggml allows at most "
                            f"{tables.GGML_MAX_NAME - 1} (GGML_MAX_NAME={tables.GGML_MAX_NAME})", f"offset {at}")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"name of tensor {index} is not valid UTF-8", f"offset {at}") from None
        where = f"tensor {name!r}"
        dims_at = cur.tell()
        n_dims = cur.u32(f"n_dims of {where}")
        max_dims = min(tables.GGML_MAX_DIMS, self.limits.max_dims)
        if n_dims > max_dims:
            raise self.fail(f"has {n_dims} dimensions; ggml allows at most {max_dims}",
                            f"{where} (offset {dims_at})")
        dims = [cur.u64(f"dimension {j} of {where}") for j in range(n_dims)]
        numel = 1
        for j, d in enumerate(dims):
            if d >= INT64_LIMIT:
                raise self.fail(f"dimension {j} is negative ({d - 2**64})", f"{where} (offset {dims_at})")
            if d == 0:
                raise self.fail(f"dimension {j} is 0 (a tensor with no elements)", f"{where} (offset {dims_at})")
            numel *= d
        if numel >= INT64_LIMIT or numel > self.limits.max_tensor_elements:
            raise self.fail(f"has {numel} elements ({' x '.join(map(str, dims))}), over the limit of "
                            f"{self.limits.max_tensor_elements} (raise it with --limit max_tensor_elements=N)",
                            f"{where} (offset {dims_at})")
        type_at = cur.tell()
        type_id = cur.u32(f"type of {where}")
        if type_id >= 2**31:
            raise self.fail(f"has a negative ggml type id ({type_id - 2**32})", f"{where} (offset {type_at})")
        offset = cur.u64(f"data offset of {where}")
        sizes = tables.tensor_type_sizes(type_id)
        nbytes: int | None = None
        if sizes is not None:
            block, type_size = sizes
            if dims and dims[0] % block:
                raise self.fail(f"row length {dims[0]} is not a multiple of the {tables.tensor_type_name(type_id)} "
                                f"block size {block}", where)
            if not dims and block != 1:
                raise self.fail(f"is a scalar of block type {tables.tensor_type_name(type_id)}", where)
            nbytes = numel // block * type_size
            if nbytes >= INT64_LIMIT:
                raise self.fail(f"needs {nbytes} bytes, more than a file can hold", where)
        elif type_id in tables.REMOVED_TENSOR_TYPES:
            self.warnings.append(f"tensor {name!r} has type {type_id} ({tables.REMOVED_TENSOR_TYPES[type_id]}), "
                                 "which ggml has removed (its size is not known); requantise the model with "
                                 "current llama.cpp")
        else:
            self.warnings.append(f"tensor {name!r} has ggml type {type_id}, unknown to qcheck and to the "
                                 "installed gguf package; its size is not known")
        return name, type_id, dims, numel, nbytes, offset, at

    def _place_tensors(self, records: list, data_offset: int, alignment: int) -> list[TensorInfo]:
        """Check offsets as ggml does (aligned, contiguous, in order) and the data against the file size."""
        size = self.source.size
        tensors: list[TensorInfo] = []
        seen: set[str] = set()
        expected = 0
        after_unknown: int | None = None  # offset of the previous tensor when its size is unknown
        for name, type_id, dims, _numel, nbytes, offset, at in records:
            where = f"tensor {name!r}"
            if name in seen:
                raise self.fail("duplicate tensor name", f"{where} (offset {at})")
            seen.add(name)
            if offset % alignment:
                raise self.fail(f"data offset {offset} is not a multiple of the alignment {alignment}", where)
            if after_unknown is not None:
                if offset <= after_unknown:
                    raise self.fail(f"data offset {offset} is not after the previous tensor's ({after_unknown})",
                                    where)
            elif offset < expected:
                raise self.fail(f"data offset {offset} overlaps the previous tensor (expected {expected})", where)
            elif offset > expected:
                raise self.fail(f"data offset {offset} leaves a hole after the previous tensor (expected "
                                f"{expected}; ggml requires contiguous tensor data)", where)
            start = data_offset + offset
            end = start + (nbytes if nbytes is not None else 1)
            if end > INT64_LIMIT:
                raise self.fail(f"data at offset {start} lies beyond any possible file size", where)
            if size is not None and end > size:
                raise self.fail(f"data [{start}, {end}) extends past the end of the file ({size} bytes): the "
                                "file is truncated (incomplete download?)", where)
            if nbytes is not None:
                expected = offset + _align(nbytes, alignment)
                after_unknown = None
            else:
                after_unknown = offset
            tensors.append(TensorInfo(name=name, dtype=tables.tensor_type_name(type_id), shape=tuple(reversed(dims)),
                                      nbytes=nbytes, offset=start))
        return tensors


#: GGUF scalar type -> the Cursor method that reads it
_SCALAR_METHODS = {"UINT8": "u8", "INT8": "i8", "UINT16": "u16", "INT16": "i16", "UINT32": "u32", "INT32": "i32",
                   "UINT64": "u64", "INT64": "i64", "FLOAT32": "f32", "FLOAT64": "f64"}


def _align(x: int, alignment: int) -> int:
    return x + (alignment - x % alignment) % alignment


def _array_len(value: Any) -> int | None:
    if isinstance(value, ArraySummary):
        return value.count
    if isinstance(value, list):
        return len(value)
    return None


# ----------------------------------------------------------------------------------- split sets
def split_info(name: str) -> tuple[str, int, int] | None:
    """``(prefix, shard, total)`` when ``name``'s file name follows ``<prefix>-0000k-of-0000N.gguf``."""
    directory, _, base = name.rpartition("/")
    m = SPLIT_RE.match(base)
    if not m:
        return None
    prefix = f"{directory}/{m['prefix']}" if directory else m["prefix"]
    return prefix, int(m["shard"]), int(m["total"])


def shard_name(prefix: str, shard: int, total: int) -> str:
    """llama.cpp's shard file name (``llama_split_path``): ``<prefix>-%05d-of-%05d.gguf``."""
    return f"{prefix}-{shard:05d}-of-{total:05d}.gguf"


def load_gguf(fileset: FileSet, name: str, limits: Limits = DEFAULT_LIMITS) -> Checkpoint:
    """Read one GGUF file, or every shard of a split set, into a ``Checkpoint``.

    A name like ``model-00002-of-00003.gguf`` reads shards 1..3 (shard 1 first, as llama.cpp
    requires); a missing shard, a ``split.no``/``split.count`` that disagrees with the name,
    duplicate tensors across shards or a wrong ``split.tensors.count`` is an InputError naming the
    shard. Metadata comes from shard 1 (where llama.cpp reads it); each tensor's ``file`` is its shard.
    ``Checkpoint.path`` is ``<fileset root>/<name>``; callers may overwrite it with what the user typed.
    """
    display = _display(fileset, name)
    split = split_info(name)
    if split is None:
        header = _read_from(fileset, name, limits)
        count = header.metadata.get("split.count")
        if isinstance(count, int) and count > 1:
            raise InputError(f"declares split.count={count}, but its name does not follow "
                             "<prefix>-00001-of-0000N.gguf, so the other shards cannot be found", path=display)
        return _checkpoint(display, [(name, header)])

    prefix, shard, total = split
    if total < 1 or shard < 1 or shard > total:
        raise InputError(f"shard number {shard} of {total} is impossible", path=display)
    if total > limits.max_shards:
        raise InputError(f"{total} shards is over the limit of {limits.max_shards} "
                         "(raise it with --limit max_shards=N)", path=display)
    names = [shard_name(prefix, k, total) for k in range(1, total + 1)]
    if shard != 1 and not fileset.exists(names[0]):
        raise InputError(f"this is shard {shard} of {total}; shard 1 ({names[0]}) is missing, and llama.cpp "
                         "loads a split model from its first shard", path=display)
    missing = [n for n in names if n != name and not fileset.exists(n)]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise InputError(f"split GGUF of {total} shards is incomplete: missing {shown}", path=display)

    headers: list[tuple[str, GGUFHeader]] = []
    seen: dict[str, str] = {}
    n_total = 0
    for k, shard_file in enumerate(names):
        header = _read_from(fileset, shard_file, limits)
        where = _display(fileset, shard_file)
        md = header.metadata
        if total > 1 or "split.count" in md:
            if md.get("split.count") != total:
                raise InputError(f"split.count is {md.get('split.count')}, but the file name says {total} shards",
                                 path=where)
            if md.get("split.no") != k:
                raise InputError(f"split.no is {md.get('split.no')}, expected {k} for shard {k + 1} of {total}",
                                 path=where)
        for t in header.tensors:
            if t.name in seen:
                raise InputError(f"tensor {t.name!r} is also in {seen[t.name]}", path=where)
            seen[t.name] = shard_file
        n_total += len(header.tensors)
        if n_total > limits.max_tensors:
            raise InputError(f"the shards hold more than {limits.max_tensors} tensors "
                             "(raise it with --limit max_tensors=N)", path=where)
        headers.append((shard_file, header))
    declared = headers[0][1].metadata.get("split.tensors.count")
    if total > 1 and declared is not None and declared != n_total:
        raise InputError(f"split.tensors.count is {declared}, but the {total} shards hold {n_total} tensors",
                         path=_display(fileset, names[0]))
    return _checkpoint(display, headers)


def _read_from(fileset: FileSet, name: str, limits: Limits) -> GGUFHeader:
    from qcheck.readers.gguf_cache import read_cached

    source = fileset.open(name)
    try:
        return read_cached(source, limits, lambda: read_gguf_header(source, limits))
    finally:
        source.close()


def _display(fileset: FileSet, name: str) -> str:
    root = str(fileset.root)
    if not root or root == ".":
        return name
    return f"{root.rstrip('/')}/{name}"


def _checkpoint(path: str, headers: list[tuple[str, GGUFHeader]]) -> Checkpoint:
    first = headers[0][1]
    ckpt = Checkpoint(path=path, container="gguf", metadata=dict(first.metadata))
    for shard_file, header in headers:
        for t in header.tensors:
            t.file = shard_file
            ckpt.tensors[t.name] = t
        ckpt.files.append(SourceFile(name=shard_file, size_bytes=header.file_size, kind="gguf"))
        prefix = f"{shard_file}: " if len(headers) > 1 else ""
        ckpt.warnings.extend(prefix + w for w in header.warnings)
    return ckpt
