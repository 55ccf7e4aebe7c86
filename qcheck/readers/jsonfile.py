"""Bounded JSON parsing for untrusted headers and side files.

``json.loads`` alone trusts its input: it recurses without bound (RecursionError on ``[[[[...``),
keeps the last of duplicate keys (a parser differential: another reader keeps the first), accepts
lone surrogates that later break UTF-8 output, and decodes UTF-16/32 when given bytes. Everything
here checks those before or while parsing and turns every failure into an ``InputError`` that names
the file and the problem.
"""

from __future__ import annotations

import gc
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.source import FileSet

# A JSON string literal (unrolled loop: no per-character alternation, linear time).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS_ONLY = bytes(b for b in range(256) if b not in b"[]{}")
# brackets of both kinds as one: the nesting depth does not depend on the kind (the parser rejects a mismatch)
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
#: bytes of text cut at a time when strings are removed by splitting on quotes (bounds the list of pieces)
_CHUNK = 1 << 20
#: every byte but the ones the pre-scan's skeleton keeps: brackets, quotes and colons
_SKELETON_ONLY = bytes(b for b in range(256) if b not in b'[]{}":')
# A \uD800-\uDFFF escape: the only way a surrogate gets into text that decoded as UTF-8.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _Duplicate(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return result


def _unique_pairs_checked(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = _unique_pairs(pairs)
    for key in result:
        if not key.isascii():
            _check_text(key)
    return result


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("lone UTF-16 surrogate escape in a string") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _outside_strings(data: bytes) -> bytes:
    """The JSON text with every string literal removed (so brackets and colons in strings don't count).

    The pieces are appended to one buffer as they are found: ``data.split(b'"')`` and ``re.sub`` both hold
    an object per string (~50 bytes each) until the end, so a 15 MB header of 200k entries took 230 MB and
    a 55 MB header of empty strings 1.4 GB, before any count was checked; this takes ~the input's size.

    Without a backslash every quote opens or closes a string, so the text is cut into ~1 MB chunks that
    each hold an even number of quotes and the even pieces of each chunk's split are kept: C speed, and
    only one chunk's pieces alive at a time. With escapes, a regex walks the string literals one by one.
    """
    if b"\\" not in data:
        return _outside_strings_plain(data)
    out = bytearray()
    pos = 0
    for match in _STRING.finditer(data):
        out += data[pos:match.start()]
        pos = match.end()
    out += data[pos:]
    return bytes(out)


def _outside_strings_plain(data: bytes) -> bytes:
    """``_outside_strings`` for text without escapes: split each even-quote chunk on quotes, keep even pieces."""
    out = bytearray()
    pos, n = 0, len(data)
    while pos < n:
        end = min(pos + _CHUNK, n)
        if data.count(b'"', pos, end) % 2:
            nxt = data.find(b'"', end)
            end = n if nxt < 0 else nxt + 1
        pieces = data[pos:end].split(b'"')
        if len(pieces) % 2:
            out += b"".join(pieces[0::2])
        else:  # an unterminated string: kept as text, as the regex (which never matches it) keeps it
            out += b"".join(pieces[0:-1:2]) + b'"' + pieces[-1]
        pos = end
    return bytes(out)


_gc_lock = threading.Lock()
_gc_paused = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold the cyclic garbage collector while a parser builds many small acyclic objects.

    A 300,000-entry header is ~1.5 million dicts, lists and records; the collector would otherwise traverse
    the growing heap again and again (a third of ``json.loads``'s time). Nothing built here forms a cycle,
    so reference counting frees the same memory. Nested and concurrent uses (Hub shards parsed on several
    threads) share one pause; the last one out restores the collector's previous state."""
    global _gc_paused, _gc_was_enabled
    with _gc_lock:
        if _gc_paused == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_paused += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_paused -= 1
            if _gc_paused == 0 and _gc_was_enabled:
                gc.enable()


def _plain_skeleton(data: bytes) -> bytes | None:
    """The brackets and colons outside strings, in order, when no string holds a bracket, colon or escape.

    The common case at C speed: keep only ``[]{}":`` (a clean string becomes ``""``), drop every ``""``
    pair in one left-to-right pass; any quote left means a string held one of those bytes (the first such
    string's opening quote is followed by it, and the quote before it was consumed with its partner), so
    None sends the caller to the exact scan. Without backslashes quotes alternate open/close, so the result
    is exactly ``_outside_strings`` with everything but ``[]{}:`` removed."""
    if b"\\" in data:
        return None
    kept = data.translate(None, _SKELETON_ONLY).replace(b'""', b"")
    return None if b'"' in kept else kept


#: what parsing costs in Python objects: a list or dict (header and table), and a value (its slot in its container
#: and the object: a float, an int, a short string), in bytes; an estimate from the text alone, before parsing
CONTAINER_COST = 64
VALUE_COST = 32
#: the most ``parsed_size`` can be per byte of text: ``[[[...]]]`` (a container and a value per 2 bytes)
MAX_COST_PER_BYTE = (CONTAINER_COST + VALUE_COST) // 2


def parsed_size(data: bytes) -> int:
    """About how many bytes of memory ``json.loads(data)`` would allocate, counted from the text in linear passes:
    ``[[],[],...]`` costs ~20 times its size, a list of short floats ~8 times, keys and long strings little."""
    outside = _outside_strings(data)
    containers = outside.count(b"[") + outside.count(b"{")
    values = outside.count(b",") + outside.count(b":") + containers
    return containers * CONTAINER_COST + values * VALUE_COST


def structure_scan(data: bytes, max_depth: int) -> tuple[int, int]:
    """(nesting depth, number of objects) of JSON text, without recursion and in linear passes."""
    depth, objects, _pairs = _structure(data, max_depth)
    return depth, objects


def _structure(data: bytes, max_depth: int) -> tuple[int, int, int]:
    """(depth, objects, key/value pairs) of JSON text.

    Strings are removed first so brackets inside them do not count; each pass then deletes the
    innermost ``[]``/``{}`` pairs, so the number of passes is the depth. Stops early past
    ``max_depth`` and returns ``max_depth + 1``. Brackets that do not pair up (which valid JSON
    never has) give depth -1. Pairs are the colons outside strings.
    """
    skeleton = _plain_skeleton(data)
    if skeleton is not None:
        pairs = skeleton.count(b":")
        skeleton = skeleton.translate(None, b":")
    else:
        outside = _outside_strings(data)
        pairs = outside.count(b":")
        skeleton = outside.translate(None, _BRACKETS_ONLY)
    objects = skeleton.count(b"{")
    skeleton = skeleton.translate(_ONE_KIND)
    depth = 0
    while skeleton:
        reduced = skeleton.replace(b"[]", b"")  # one pass drops exactly the innermost pairs
        if len(reduced) == len(skeleton):
            return -1, objects, pairs
        depth += 1
        if depth > max_depth:
            return depth, objects, pairs
        skeleton = reduced
    return depth, objects, pairs


def parse_json(
    data: bytes,
    *,
    where: str,
    max_depth: int,
    path: str | None = None,
    allow_constants: bool = True,
    max_objects: int | None = None,
    max_pairs: int | None = None,
) -> tuple[Any, int]:
    """Parse one JSON value at the start of ``data``; return it and the offset just past it.

    Rejects: invalid UTF-8, nesting deeper than ``max_depth``, more than ``max_objects`` objects or
    ``max_pairs`` key/value pairs (both counted before anything is built), duplicate keys anywhere, lone surrogates in keys, NaN/Infinity when ``allow_constants`` is false.
    Trailing bytes are the caller's business (the offset says where the value ended).

    Duplicates are found cheaply: the C parser builds the dicts and a counting ``object_hook`` sums
    their sizes; fewer keys than colons in the text means a key was overwritten, and only then is the
    text parsed again, pair by pair, to name it.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not valid UTF-8 at byte {exc.start}", path=path, where=where) from None
    depth, objects, pairs = _structure(data, max_depth)
    if depth < 0:
        raise InputError("invalid JSON: brackets do not pair up", path=path, where=where)
    if depth > max_depth:
        raise InputError(f"JSON nested deeper than {max_depth} levels (limit max_json_nesting)",
                         path=path, where=where)
    if max_objects is not None and objects > max_objects:
        raise InputError(f"{objects} JSON objects, over the limit of {max_objects}", path=path, where=where)
    if max_pairs is not None and pairs > max_pairs:
        raise InputError(f"{pairs} JSON key/value pairs, over the limit of {max_pairs} (limits max_tensors, max_kv)",
                         path=path, where=where)
    start = len(text) - len(text.lstrip(" \t\r\n"))
    constant = None if allow_constants else _reject_constant
    counted = [0]

    def count_keys(obj: dict[str, Any]) -> dict[str, Any]:
        counted[0] += len(obj)
        return obj

    if b"\\" in data and _SURROGATE_ESCAPE.search(data):
        decoder = json.JSONDecoder(object_pairs_hook=_unique_pairs_checked, parse_constant=constant)
    else:
        decoder = json.JSONDecoder(object_hook=count_keys, parse_constant=constant)
    try:
        with paused_gc():
            value, end = decoder.raw_decode(text, start)
        if decoder.object_pairs_hook is None and counted[0] != pairs:
            # a key was overwritten (or the colons are in trailing text): find out, pair by pair
            json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=constant).raw_decode(text, start)
    except _Duplicate as exc:
        raise InputError(f"duplicate key {quoted(exc.key)} (parsers disagree on which one wins)",
                         path=path, where=where) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} at character {exc.pos}", path=path, where=where) from None
    except MemoryError:  # was reported as "invalid JSON: " (a MemoryError has no message)
        raise InputError(f"ran out of memory parsing {len(data)} bytes of JSON holding {objects} objects (a bloated "
                         "header?); lower the bounds with --limit max_tensors=N or max_safetensors_header=N, or give "
                         "qcheck more memory", path=path, where=where) from None
    except (ValueError, RecursionError, OverflowError) as exc:
        raise InputError(f"invalid JSON: {exc}", path=path, where=where) from None
    # raw_decode counts characters; callers need a byte offset into ``data``.
    end_bytes = end if text.isascii() else len(text[:end].encode("utf-8"))
    return value, end_bytes


def check_strings(value: Any, *, where: str, path: str | None = None, max_depth: int = 64) -> None:
    """Walk a parsed JSON value (iteratively) and reject strings that cannot be written as UTF-8."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    _check_text(item)
                except ValueError as exc:
                    raise InputError(str(exc), path=path, where=where) from None
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def loads_document(data: bytes, *, name: str, limits: Limits, path: str | None = None) -> dict[str, Any]:
    """A whole JSON side file: one object, only whitespace after it, strings valid."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark: Python's json and most tools accept files written so
    value, end = parse_json(data, where="", path=path or name, max_depth=limits.max_json_nesting,
                            allow_constants=True)
    if data[end:].strip(b" \t\r\n"):
        raise InputError(f"extra data after the JSON value at byte {end}", path=path or name)
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, found {_json_type(value)}", path=path or name)
    check_strings(value, where="", path=path or name)
    return value


def load_json(fileset: FileSet, name: str, limits: Limits) -> dict[str, Any]:
    """Read and parse a JSON side file (config.json, an index, a quantisation config) within the limits."""
    data = fileset.read_small(name, limits.max_json_bytes)
    if len(data) > limits.max_json_bytes:
        raise InputError(f"file is over the {limits.max_json_bytes}-byte limit for side files (limit max_json_bytes)",
                         path=_display(fileset, name))
    return loads_document(data, name=name, limits=limits, path=_display(fileset, name))


def _display(fileset: FileSet, name: str) -> str:
    root = str(getattr(fileset, "root", "") or "")
    if not root:
        return name
    sep = "" if root.endswith(("/", "\\")) else "/"
    return f"{root}{sep}{name}"


def quoted(text: object, limit: int = 120) -> str:
    """``repr`` of a name read from a file, cut to ``limit`` characters: hostile names can be megabytes."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
