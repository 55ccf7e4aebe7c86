"""The safetensors header: an 8-byte little-endian length, then a JSON object describing every tensor.

We read only the header (never tensor data) and apply the reference reader's checks
(huggingface/safetensors ``safetensors/src/tensor.rs``: ``read_metadata`` and ``Metadata::validate``)
plus the ones it leaves out (duplicate keys, bounded nesting and counts). A header that the reference
loader would refuse is an ``InputError`` here too, so ``qcheck inspect`` never calls a broken file fine.
Unknown dtype strings are the one deliberate leniency: newer writers add dtypes (F4, F8_E8M0 and the
FNUZ variants arrived in 2025-26), so they are kept verbatim with a warning instead of failing.

Speed: a header spelled as the safetensors writer spells it is cut into columns by one regex
(``_compact_header``); any other header is parsed by the bounded JSON parser and checked column by column
(``_plain_entries``) or, when an entry is not plain, entry by entry. All three give the same result.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import add, itemgetter, mul, sub
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import TensorColumns, TensorInfo, TensorMap
from qcheck.readers.dtype_bits import SAFETENSORS_BITS as DTYPE_BITS
from qcheck.readers.jsonfile import parse_json, paused_gc, quoted
from qcheck.readers.lfs import is_lfs_pointer, raise_for_pointer
from qcheck.source import ByteSource

N_LEN = 8
#: bytes read at once from the start of a file: most headers fit, so a remote source needs one request
FIRST_READ = 100_000
#: offsets are u64 in the format; Python ints are unbounded, so cap them where the reference would overflow
MAX_OFFSET = 2**64 - 1
_ENTRY_KEYS = ("dtype", "shape", "data_offsets")
#: bytes per element of the dtypes whose elements fill whole bytes (the fast path handles only these)
_WHOLE_BYTES = {k: v // 8 for k, v in DTYPE_BITS.items() if v % 8 == 0}
_DTYPE, _SHAPE, _OFFSETS = (itemgetter(k) for k in _ENTRY_KEYS)
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)

# The header as safetensors' own writer spells it (serde_json: no whitespace, an entry's fields in declaration
# order), as Python's json.dumps does by default (", " and ": "), or either with the fields sorted (nlohmann::json
# in MLX's writer, sort_keys), read with one regex instead of building ~2 million JSON objects (_compact_header).
#: a JSON unsigned integer of at most 20 digits (u64 needs 20; more is never valid here, and int() stays cheap)
_UINT = r"(?:0|[1-9][0-9]{0,19})"
#: a JSON string's characters with no escape (a raw quote, backslash or control character never matches)
_PLAIN_CHARS = r'[^"\\\x00-\x1f]*'
_JSON_STRING = r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"'


@dataclass(frozen=True)
class _Spelling:
    """One way of spelling a header without escapes: the text between a key and its value, and between items,
    and the order of an entry's fields: declaration order (serde_json, json.dumps) or sorted (``sort_keys``, and
    writers whose JSON objects are sorted maps: nlohmann::json, which MLX's writer uses)."""

    colon: str
    comma: str
    sorted_keys: bool = False

    @property
    def entry(self) -> re.Pattern[str]:
        """One entry: name, then dtype and shape as one text (few distinct ones: each is parsed once), the two
        offsets, and the separator after it (``comma``, or ``}`` after the last). The groups come in the order
        ``order`` names."""
        c, m = self.colon, self.comma
        kind = rf'"dtype"{c}"({_PLAIN_CHARS}"{m}"shape"{c}\[(?:{_UINT}(?:{m}{_UINT})*)?)\]'
        offsets = rf'"data_offsets"{c}\[({_UINT}){m}({_UINT})\]'
        fields = f"{offsets}{m}{kind}" if self.sorted_keys else f"{kind}{m}{offsets}"
        return re.compile(rf'"({_PLAIN_CHARS})"{c}\{{{fields}\}}({m}|\}})')

    @property
    def order(self) -> tuple[int, int, int, int, int]:
        """Where ``entry``'s groups for name, dtype-and-shape, begin, stop and separator are, in that order."""
        return (0, 3, 1, 2, 4) if self.sorted_keys else (0, 1, 2, 3, 4)

    @property
    def metadata(self) -> re.Pattern[str]:
        """A leading ``__metadata__`` object of strings (parse_json validates it afterwards), and the separator."""
        c, m, s = self.colon, self.comma, _JSON_STRING
        return re.compile(rf'"__metadata__"{c}\{{(?:{s}{c}{s}(?:{m}{s}{c}{s})*)?\}}{m}')

    @property
    def fixed(self) -> int:
        """Characters of an entry outside its captured groups and its separator (the same in either order)."""
        c, m = self.colon, self.comma
        return len(f'""{c}{{"dtype"{c}"]{m}"data_offsets"{c}[{m}]}}')

    @property
    def kind_split(self) -> str:
        """What separates the dtype from the dimensions in an entry's dtype-and-shape text."""
        return f'"{self.comma}"shape"{self.colon}['


#: (spelling, entry regex, metadata regex, fixed characters per entry), the writer's own spelling first
_SPELLINGS = [(sp, sp.entry, sp.metadata, sp.fixed) for sp in (
    _Spelling(":", ","), _Spelling(": ", ", "), _Spelling(":", ",", sorted_keys=True),
    _Spelling(": ", ", ", sorted_keys=True))]

@dataclass
class SafetensorsHeader:
    """What one safetensors header says, validated."""

    name: str
    #: a ``TensorMap`` (columns, records built on demand) when every entry is plain, else a dict
    tensors: MutableMapping[str, TensorInfo]
    metadata: dict[str, str]
    header_length: int  # N: bytes of JSON (with padding)
    data_offset: int  # 8 + N: where the byte buffer starts
    data_length: int | None  # bytes of tensor data the header covers (the last offset end)
    file_size: int | None
    warnings: list[str] = field(default_factory=list)


def looks_like_safetensors(head: bytes) -> bool:
    """True when the first bytes are an 8-byte length followed by ``{`` (the format's only magic)."""
    return len(head) >= N_LEN + 1 and head[N_LEN:N_LEN + 1] == b"{"


def read_safetensors_header(
    source: ByteSource, limits: Limits = DEFAULT_LIMITS, *, file: str = ""
) -> SafetensorsHeader:
    """Read and validate the header of one safetensors file; ``file`` is stored on each TensorInfo."""
    name = source.name
    size = source.size
    first = source.read_at(0, FIRST_READ if size is None else min(FIRST_READ, size))
    if is_lfs_pointer(first):
        raise_for_pointer(source)
    if len(first) < N_LEN:
        raise InputError(f"file is {len(first)} bytes, too short for the 8-byte header length", path=name)
    (n,) = struct.unpack("<Q", first[:N_LEN])
    if n > limits.max_safetensors_header:
        raise InputError(f"header length {n} is over the {limits.max_safetensors_header}-byte limit "
                         "(limit max_safetensors_header)", path=name, where="offset 0")
    if size is not None and n > size - N_LEN:
        raise InputError(f"header length {n} runs past the end of the {size}-byte file", path=name,
                         where="offset 0")
    if n < 2:
        raise InputError(f"header length {n} is too small for a JSON object", path=name, where="offset 0")
    if len(first) >= N_LEN + n:
        raw = first[N_LEN:N_LEN + n]
    else:
        rest = source.read_at(len(first), N_LEN + n - len(first))
        raw = first[N_LEN:] + rest
        if len(raw) < n:
            raise InputError(f"file ends inside the {n}-byte header (got {len(raw)} bytes)", path=name,
                             where=f"offset {N_LEN + len(raw)}")
    return parse_header_bytes(raw, limits, name=name, file_size=size, file=file)


def parse_header_bytes(
    raw: bytes, limits: Limits = DEFAULT_LIMITS, *, name: str = "", file_size: int | None = None,
    file: str = ""
) -> SafetensorsHeader:
    """Validate the N header bytes (everything after the length prefix)."""
    with paused_gc():
        return _parse_header(raw, limits, name, file_size, file)


def _parse_header(raw: bytes, limits: Limits, name: str, file_size: int | None, file: str) -> SafetensorsHeader:
    n = len(raw)
    if raw[:1] != b"{":
        raise InputError(f"header does not start with '{{' (first byte {raw[:1]!r})", path=name,
                         where=f"offset {N_LEN}")
    data_offset = N_LEN + n
    compact = _compact_header(raw, limits, name, data_offset, file)
    if compact is not None:
        _check_size(data_offset, compact[1], file_size, name)
        return SafetensorsHeader(name=name, tensors=compact[0], metadata=compact[2], header_length=n,
                                 data_offset=data_offset, data_length=compact[1], file_size=file_size)
    value, end = parse_json(raw, where="header", path=name, max_depth=min(limits.max_json_nesting, 3),
                            allow_constants=False, max_objects=limits.max_tensors + 2,
                            # 4 pairs per tensor entry (name, dtype, shape, data_offsets), 1 per metadata entry
                            max_pairs=4 * (limits.max_tensors + 2) + limits.max_kv)
    warnings = _padding_warnings(raw, end, name)
    if not isinstance(value, dict):  # pragma: no cover - guarded by the leading '{'
        raise InputError("header is not a JSON object", path=name)

    metadata = _metadata(value.pop("__metadata__", None), name)
    if len(value) > limits.max_tensors:
        raise InputError(f"{len(value)} tensors, over the limit of {limits.max_tensors} (limit max_tensors)",
                         path=name)
    columns = _plain_entries(value, limits, data_offset, file)
    if columns is not None:
        _check_size(data_offset, columns[1], file_size, name)
        return SafetensorsHeader(name=name, tensors=columns[0], metadata=metadata, header_length=n,
                                 data_offset=data_offset, data_length=columns[1], file_size=file_size,
                                 warnings=warnings)
    tensors, spans, unknown, extra_fields = _general_entries(value, limits, name, data_offset, file)
    data_length = _check_layout(spans, name)
    _check_size(data_offset, data_length, file_size, name)
    for dtype, names in sorted(unknown.items()):
        warnings.append(f"unknown dtype {dtype!r} in {len(names)} tensor(s) (first: {quoted(names[0])}); "
                        "kept verbatim, its byte size not checked")
    if extra_fields:
        warnings.append(f"{len(extra_fields)} tensor entries carry fields other than dtype/shape/data_offsets "
                        f"(first: {quoted(extra_fields[0])}); ignored")
    return SafetensorsHeader(name=name, tensors=tensors, metadata=metadata, header_length=n,
                             data_offset=data_offset, data_length=data_length, file_size=file_size,
                             warnings=warnings)


def _padding_warnings(raw: bytes, end: int, name: str) -> list[str]:
    """The bytes after the JSON object: spaces (the format's padding), or tabs/newlines (a warning); anything
    else is an error naming its offset."""
    padding = raw[end:]
    if not padding.strip(b" "):
        return []
    if padding.strip(b" \t\r\n"):
        first = end + len(padding) - len(padding.lstrip(b" \t\r\n"))
        raise InputError(f"non-space bytes after the JSON header at offset {N_LEN + first}", path=name,
                         where="header padding")
    return ["header padded with tabs or newlines; the format allows only spaces"]


def _general_entries(value: dict[str, Any], limits: Limits, name: str, data_offset: int, file: str
                     ) -> tuple[dict[str, TensorInfo], list[tuple[int, int, str]], dict[str, list[str]], list[str]]:
    """Every tensor entry of a header that is neither compact nor plain: (tensors, data spans, names per unknown
    dtype, names of entries with extra fields). The common valid entry is checked inline (no call, no message
    built); anything else by ``_entry``, which names the problem."""
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    unknown: dict[str, list[str]] = {}
    extra_fields: list[str] = []
    max_name, max_dims, max_elements = limits.max_string_bytes, limits.max_dims, limits.max_tensor_elements
    for tname, entry in value.items():
        if len(tname) > max_name:
            raise InputError(f"tensor name of {len(tname)} characters is over the limit", path=name)
        dtype: Any = entry.get("dtype") if type(entry) is dict else None
        shape: Any = entry.get("shape") if dtype is not None else None
        offsets: Any = entry.get("data_offsets") if dtype is not None else None
        bits = DTYPE_BITS.get(dtype) if type(dtype) is str else None
        plain = (bits is not None and type(shape) is list and len(shape) <= max_dims and type(offsets) is list
                 and len(offsets) == 2 and type(offsets[0]) is int and type(offsets[1]) is int
                 and 0 <= offsets[0] <= offsets[1] <= MAX_OFFSET)
        if plain:
            for d in shape:
                if type(d) is not int or d < 0 or d > max_elements:  # type() rejects bools
                    plain = False
                    break
        if plain:
            begin, stop = offsets
            shape = tuple(shape)
        else:
            dtype, shape, begin, stop = _entry(tname, entry, limits, name)
            bits = DTYPE_BITS.get(dtype)
        if len(entry) > 3:
            extra_fields.append(tname)
        numel = math.prod(shape)
        if numel > max_elements:
            _numel(tname, shape, limits, name)  # raises, naming the tensor
        nbytes: int | None = None
        if bits is None:
            unknown.setdefault(dtype, []).append(tname)
        else:
            nbits = numel * bits
            if nbits % 8:
                raise InputError(f"{numel} elements of {dtype} ({bits} bits each) do not fill whole bytes",
                                 path=name, where=f"tensor {quoted(tname)}")
            nbytes = nbits // 8
            if stop - begin != nbytes:
                raise InputError(
                    f"data_offsets [{begin}, {stop}] hold {stop - begin} bytes but shape {list(shape)} of "
                    f"{dtype} needs {nbytes}", path=name, where=f"tensor {quoted(tname)}")
        tensors[tname] = TensorInfo(tname, dtype, shape, nbytes, data_offset + begin, file)
        spans.append((begin, stop, tname))
    return tensors, spans, unknown, extra_fields


def _check_size(data_offset: int, data_length: int, file_size: int | None, name: str) -> None:
    """The tensor data must end exactly where the file does (no truncation, nothing appended)."""
    if file_size is None:
        return
    available = file_size - data_offset
    if data_length > available:
        raise InputError(f"tensor data ends at byte {data_offset + data_length} but the file has "
                         f"{file_size} bytes (truncated)", path=name)
    if data_length < available:
        raise InputError(f"{available - data_length} bytes after the last tensor at offset "
                         f"{data_offset + data_length} (appended data: a possible polyglot file)", path=name)


def _plain_entries(value: dict[str, Any], limits: Limits, data_offset: int, file: str
                   ) -> tuple[TensorMap, int] | None:
    """Every entry checked at once, column by column with C-speed builtins, when all are plain.

    Plain: exactly ``dtype``/``shape``/``data_offsets``, a dtype of whole bytes that safetensors knows, and
    every bound the per-entry loop checks holding (names, dimensions, element counts, byte sizes, offsets
    tiling the data). Returns the tensors and the data length, exactly what the loop would build; None as
    soon as anything is not plain, and the loop (which names the first bad entry, or warns) runs instead.
    """
    names = list(value)
    entries = list(value.values())
    if not names:
        return None
    try:
        if max(map(len, names)) > limits.max_string_bytes:
            return None
        if set(map(type, entries)) != {dict} or set(map(len, entries)) != {3}:
            return None
        dtypes = list(map(_DTYPE, entries))  # KeyError: a key is missing (the loop says which)
        shapes = list(map(_SHAPE, entries))
        offsets = list(map(_OFFSETS, entries))
        if not _WHOLE_BYTES.keys() >= set(dtypes):  # TypeError: an unhashable dtype
            return None
        if set(map(type, shapes)) != {list} or max(map(len, shapes)) > limits.max_dims:
            return None
        dims = list(chain.from_iterable(shapes))
        if dims and (set(map(type, dims)) != {int} or min(dims) < 0 or max(dims) > limits.max_tensor_elements):
            return None  # type() is exact: JSON true/false (bools) are not dimensions
        numels = list(map(math.prod, shapes))
        if max(numels) > limits.max_tensor_elements:
            return None
        del dims
        if set(map(type, offsets)) != {list} or set(map(len, offsets)) != {2}:
            return None
        begins = list(map(_FIRST, offsets))
        stops = list(map(_SECOND, offsets))
        if set(map(type, begins)) != {int} or set(map(type, stops)) != {int} or min(begins) < 0:
            return None
    except (KeyError, TypeError):
        return None
    return _plain_columns(names, dtypes, list(map(tuple, shapes)), numels, begins, stops, data_offset, file)


def _plain_columns(names: Sequence[str], dtypes: list[str], shapes: list[tuple[int, ...]], numels: list[int],
                   begins: list[int], stops: list[int], data_offset: int, file: str
                   ) -> tuple[TensorMap, int] | None:
    """The checks that need every entry at once (byte sizes, offsets tiling the data), then the tensors.

    The columns hold plain values already (known whole-byte dtypes, shapes and element counts within the
    limits, non-negative integer offsets); None when the sizes or the layout are wrong (the loop says how)."""
    nbytes = list(map(mul, numels, map(_WHOLE_BYTES.__getitem__, dtypes)))
    if max(stops) > MAX_OFFSET or list(map(sub, stops, begins)) != nbytes:
        return None
    # the spans, sorted, must tile [0, end): each begins where the one before it stops. Writers usually
    # list them in offset order; if they tile in the order listed they tile sorted (ties are empty spans)
    if begins[0] == 0 and begins[1:] == stops[:-1]:
        end = stops[-1]
    else:
        spans = sorted(zip(begins, stops, strict=True))
        starts = list(map(_FIRST, spans))
        ends = list(map(_SECOND, spans))
        del spans
        if starts[0] != 0 or starts[1:] != ends[:-1]:
            return None
        end = ends[-1]
    offsets: list[int | None] = list(map(add, begins, repeat(data_offset)))
    return TensorMap(TensorColumns(names, dtypes, shapes, nbytes, offsets, [file] * len(names))), end


def _compact_header(raw: bytes, limits: Limits, name: str, data_offset: int, file: str
                    ) -> tuple[TensorMap, int, dict[str, str]] | None:
    """The tensors, data length and metadata of a header written as safetensors' own writer writes it, or None.

    ``json`` spends most of its time building a dict, two lists and their ints per entry, only for the column
    checks to take them apart again. A header in the writer's compact form (no whitespace, fields in the order
    dtype, shape, data_offsets, no escapes in names or dtypes, an optional leading ``__metadata__`` object of
    strings), or spelled the same with ``json.dumps``'s default ``", "`` and ``": "``, or with the fields sorted
    (data_offsets, dtype, shape: ``sort_keys``, and nlohmann::json as MLX writes it), is instead cut into
    columns by one regex; the matches must tile the text exactly, so what is read is what ``json`` would read. Anything else (other spellings, and anything the full path would refuse or
    warn about: a duplicate name, a bound exceeded, a bad layout) gives None and the full path runs, so every
    error and warning stays the full path's own.
    """
    if limits.max_json_nesting < 3:  # the entries' lists are at depth 3: the full path refuses them
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    end = len(text.rstrip(" "))  # the padding is spaces (anything else: the full path warns or refuses)
    start = _start(text, end, limits, name)
    if start is None:
        return None
    (spelling, entry, _, fixed), pos, metadata = start
    found = entry.findall(text, pos, end)
    count = len(found)
    if count > limits.max_tensors:
        return None
    columns_found = list(zip(*found, strict=True))
    names, kinds, begins_text, stops_text, seps = (columns_found[i] for i in spelling.order)
    del columns_found
    del found
    covered = count * fixed + sum(map(len, names)) + sum(map(len, kinds)) + sum(map(len, begins_text)) \
        + sum(map(len, stops_text)) + sum(map(len, seps))
    if covered != end - pos or seps[-1] != "}" or seps.count("}") != 1:  # a gap, or text after the object
        return None
    del seps
    if max(map(len, names)) > limits.max_string_bytes or "__metadata__" in names:
        return None
    # each distinct dtype-and-shape text parsed once: (dtype, shape, element count)
    parsed: dict[str, tuple[str, tuple[int, ...], int]] = {}
    for kind in set(kinds):
        dtype, _, dims_text = kind.partition(spelling.kind_split)
        shape = tuple(map(int, dims_text.split(spelling.comma))) if dims_text else ()
        if dtype not in _WHOLE_BYTES or len(shape) > limits.max_dims or any(
                d > limits.max_tensor_elements for d in shape) or math.prod(shape) > limits.max_tensor_elements:
            return None
        parsed[kind] = (dtype, shape, math.prod(shape))
    rows = list(map(parsed.__getitem__, kinds))
    del kinds
    if begins_text[1:] == stops_text[:-1]:  # listed in offset order (the writer's): one int() per entry
        begins = list(map(int, begins_text))
        stops = [*begins[1:], int(stops_text[-1])]
    else:
        begins = list(map(int, begins_text))
        stops = list(map(int, stops_text))
    del begins_text, stops_text
    columns = _plain_columns(names, list(map(_FIRST, rows)), list(map(_SECOND, rows)),
                             list(map(_THIRD, rows)), begins, stops, data_offset, file)
    if columns is None or len(columns[0]) != count:  # fewer tensors than entries: a duplicate name
        return None
    return columns[0], columns[1], metadata


def _start(text: str, end: int, limits: Limits, name: str
           ) -> tuple[tuple[_Spelling, re.Pattern[str], re.Pattern[str], int], int, dict[str, str]] | None:
    """The spelling of a header's first entry, where that entry starts (after a leading ``__metadata__``),
    and the metadata; None when neither spelling fits or the metadata is not what the full path accepts."""
    for spelling in _SPELLINGS:
        pos, metadata = 1, {}
        head = spelling[2].match(text, 1, end)
        if head is not None:
            pos = head.end()
            wrapped = ("{" + text[1:pos - len(spelling[0].comma)] + "}").encode("utf-8")
            try:
                value, _ = parse_json(wrapped, where="header", path=name, max_depth=3, allow_constants=False)
                metadata = _metadata(value["__metadata__"], name)
            except InputError:
                return None
            if len(metadata) > limits.max_kv:
                return None
        if spelling[1].match(text, pos, end) is not None:  # the first entry tells the spelling: one pass
            return spelling, pos, metadata
    return None


def _metadata(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError("__metadata__ must be an object of strings", path=name, where="__metadata__")
    for key, item in value.items():
        if not isinstance(item, str):
            raise InputError(f"__metadata__ value for {quoted(key)} is not a string", path=name, where="__metadata__")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"__metadata__ value for {quoted(key)} holds a lone surrogate", path=name,
                             where="__metadata__") from None
    return value


def _entry(tname: str, entry: Any, limits: Limits, name: str) -> tuple[str, tuple[int, ...], int, int]:
    where = f"tensor {quoted(tname)}"
    if type(entry) is not dict:
        raise InputError("entry is not an object with dtype/shape/data_offsets", path=name, where=where)
    for key in _ENTRY_KEYS:
        if key not in entry:
            raise InputError(f"missing {quoted(key)}", path=name, where=where)
    dtype = entry["dtype"]
    if type(dtype) is not str or not dtype or len(dtype) > 64:
        raise InputError(f"dtype must be a short string, found {_short(dtype)}", path=name, where=where)
    if dtype not in DTYPE_BITS:
        try:
            dtype.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError("dtype holds a lone surrogate", path=name, where=where) from None
    shape = entry["shape"]
    if type(shape) is not list:
        raise InputError(f"shape must be a list, found {_short(shape)}", path=name, where=where)
    if len(shape) > limits.max_dims:
        raise InputError(f"shape has {len(shape)} dimensions, over the limit of {limits.max_dims}",
                         path=name, where=where)
    for dim in shape:
        if type(dim) is not int or dim < 0:  # type() rejects bools, which JSON true/false would give
            raise InputError(f"shape {_short(shape)} has a dimension that is not a non-negative integer",
                             path=name, where=where)
        if dim > limits.max_tensor_elements:
            raise InputError(f"dimension {dim} is over the limit of {limits.max_tensor_elements} elements",
                             path=name, where=where)
    offsets = entry["data_offsets"]
    if type(offsets) is not list or len(offsets) != 2:
        raise InputError(f"data_offsets must be two non-negative integers, found {_short(offsets)}",
                         path=name, where=where)
    begin, stop = offsets
    if type(begin) is not int or type(stop) is not int or begin < 0 or stop < 0:
        raise InputError(f"data_offsets must be two non-negative integers, found {_short(offsets)}",
                         path=name, where=where)
    if stop > MAX_OFFSET:
        raise InputError(f"data_offsets end {stop} does not fit in 64 bits", path=name, where=where)
    if stop < begin:
        raise InputError(f"data_offsets end {stop} is before begin {begin}", path=name, where=where)
    return dtype, tuple(shape), begin, stop


def _numel(tname: str, shape: tuple[int, ...], limits: Limits, name: str) -> int:
    if 0 in shape:
        return 0
    numel = 1
    for dim in shape:
        numel *= dim
        if numel > limits.max_tensor_elements:
            raise InputError(f"shape {list(shape)} has more than {limits.max_tensor_elements} elements "
                             "(limit max_tensor_elements)", path=name, where=f"tensor {quoted(tname)}")
    return numel


def _check_layout(spans: list[tuple[int, int, str]], name: str) -> int:
    """Offsets, sorted, must tile [0, end) exactly: no gap, no overlap (Metadata::validate)."""
    spans.sort()
    position = 0
    for begin, stop, tname in spans:
        if begin != position:
            if begin > position:
                problem = f"gap of {begin - position} bytes before it (previous data ends at {position})"
            else:
                problem = f"overlaps earlier tensor data (which ends at {position})"
            raise InputError(f"data_offsets [{begin}, {stop}]: {problem}", path=name, where=f"tensor {quoted(tname)}")
        position = stop
    return position


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
