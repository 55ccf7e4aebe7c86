"""Every bound of the safetensors header reader at its edge: a header exactly at a limit is read, one past it is
refused with the same message, on each path that checks it (issue #36, mutation run of readers/safetensors.py).

A header takes one of three paths (``qcheck/readers/safetensors.py``): the compact path (the writer's own spelling,
cut into columns by a regex), the column-wise path (any other spelling, parsed as JSON, every entry plain) and the
per-entry loop (an entry is not plain: here an extra entry of an unknown dtype sends the whole header there). The
loop checks a plain entry inline and anything else with ``_entry`` (here: an entry of an unknown dtype). The first
two return a ``TensorMap`` (columns: what the classifier reads), the loop a dict; the records are the same.
"""

from __future__ import annotations

import json
import re
import struct

import pytest

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import TensorMap
from qcheck.readers.safetensors import (
    DTYPE_BITS,
    _Spelling,
    looks_like_safetensors,
    parse_header_bytes,
    read_safetensors_header,
)
from qcheck.source import LocalFileSource

NAME = "limits.safetensors"
#: an entry of a dtype qcheck does not know: the per-entry loop keeps it with a warning, its byte size unchecked
UNKNOWN = {"dtype": "X9", "shape": [], "data_offsets": [0, 0]}
UNKNOWN_WARNING = "unknown dtype 'X9' in 1 tensor(s) (first: '~unknown'); kept verbatim, its byte size not checked"
PATHS = ["compact", "columns", "loop"]


def spell(header: dict, path: str) -> bytes:
    """The header spelled so that it takes ``path``: the writer's compact spelling, an indented one (parsed as
    JSON, checked column by column), or either with an unknown-dtype entry added (the per-entry loop)."""
    if path == "loop":
        header = {**header, "~unknown": UNKNOWN}
    text = json.dumps(header, separators=(",", ":")) if path == "compact" else json.dumps(header, indent=1)
    return text.encode()


def read(raw: bytes, limits: Limits = DEFAULT_LIMITS):
    return parse_header_bytes(raw, limits, name=NAME, file="f.safetensors")


def rows(header) -> dict[str, tuple]:
    """name -> (dtype, shape, nbytes and its type, absolute offset) of every tensor but the loop's extra entry."""
    return {n: (t.dtype, t.shape, t.nbytes, type(t.nbytes), t.offset, t.file)
            for n, t in header.tensors.items() if n != "~unknown"}


def check_read(raw: bytes, path: str, limits: Limits, expected: dict[str, tuple]) -> None:
    header = read(raw, limits)
    assert rows(header) == {n: (d, s, b, int, 8 + len(raw) + o, "f.safetensors") for n, (d, s, b, o) in
                            expected.items()}
    # the two fast paths keep the columns; only the loop builds a dict of records
    assert type(header.tensors) is (dict if path == "loop" else TensorMap)
    assert header.warnings == ([UNKNOWN_WARNING] if path == "loop" else [])


def refused(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> str:
    with pytest.raises(InputError) as caught:
        read(raw, limits)
    return str(caught.value)


def u8(shape: list[int], begin: int = 0) -> dict:
    """A U8 entry (one byte per element) at ``begin``."""
    numel = 1
    for d in shape:
        numel *= d
    return {"dtype": "U8", "shape": shape, "data_offsets": [begin, begin + numel]}


# ------------------------------------------------------------------------------------------- which path runs
def test_each_spelling_takes_the_path_its_tests_say():
    """The helpers' premise: compact and columns give a TensorMap, the loop a dict, the same records."""
    header = {"a": u8([2, 3]), "b": u8([4], 6)}
    expected = {"a": ("U8", (2, 3), 6, 0), "b": ("U8", (4,), 4, 6)}
    for path in PATHS:
        check_read(spell(header, path), path, DEFAULT_LIMITS, expected)


@pytest.mark.parametrize(("colon", "comma", "sorted_keys"), [(":", ",", False), (": ", ", ", False),
                                                             (":", ",", True), (": ", ", ", True)])
def test_each_spelling_regex_reads_its_own_entry(colon, comma, sorted_keys):
    """An entry spelled with the fields sorted (nlohmann::json, sort_keys) or in declaration order is read by that
    spelling's pattern, its groups where ``order`` says."""
    spelling = _Spelling(colon, comma, sorted_keys=sorted_keys)
    text = json.dumps({"w": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [8, 32]}},
                      separators=(comma, colon), sort_keys=sorted_keys)[1:]
    match = spelling.entry.fullmatch(text)
    assert match is not None
    name, kind, begin, stop, sep = (match.groups()[i] for i in spelling.order)
    assert (name, begin, stop, sep) == ("w", "8", "32", "}")
    assert kind.partition(spelling.kind_split) == ("BF16", spelling.kind_split, f"3{comma}4")
    assert len(text) == spelling.fixed + sum(map(len, (name, kind, begin, stop, sep)))


# ----------------------------------------------------------------------------------------- max_string_bytes
@pytest.mark.parametrize("path", PATHS)
def test_a_name_of_max_string_bytes_is_read_one_more_is_refused(path):
    limits = DEFAULT_LIMITS.replace(max_string_bytes=8)
    check_read(spell({"n" * 8: u8([2])}, path), path, limits, {"n" * 8: ("U8", (2,), 2, 0)})
    assert refused(spell({"n" * 9: u8([2])}, path), limits) == (
        f"{NAME}: tensor name of 9 characters is over the limit")


# ----------------------------------------------------------------------------------------------- max_dims
@pytest.mark.parametrize("path", PATHS)
def test_max_dims_dimensions_are_read_one_more_is_refused(path):
    limits = DEFAULT_LIMITS.replace(max_dims=3)
    check_read(spell({"w": u8([1, 2, 3])}, path), path, limits, {"w": ("U8", (1, 2, 3), 6, 0)})
    assert refused(spell({"w": u8([1, 2, 3, 1])}, path), limits) == (
        f"{NAME}: tensor 'w': shape has 4 dimensions, over the limit of 3")


def test_max_dims_on_an_entry_of_unknown_dtype():
    """``_entry`` (an unknown dtype never takes the inline check) keeps the same bound."""
    limits = DEFAULT_LIMITS.replace(max_dims=3)
    header = read(json.dumps({"w": {"dtype": "X9", "shape": [1, 2, 3], "data_offsets": [0, 5]}}).encode(), limits)
    assert header.tensors["w"].shape == (1, 2, 3) and header.tensors["w"].nbytes is None
    assert header.data_length == 5
    assert header.warnings == ["unknown dtype 'X9' in 1 tensor(s) (first: 'w'); kept verbatim, its byte size "
                               "not checked"]
    raw = json.dumps({"w": {"dtype": "X9", "shape": [1, 2, 3, 4], "data_offsets": [0, 5]}}).encode()
    assert refused(raw, limits) == f"{NAME}: tensor 'w': shape has 4 dimensions, over the limit of 3"


# ------------------------------------------------------------------------------------ max_tensor_elements
@pytest.mark.parametrize("path", PATHS)
def test_a_dimension_of_max_tensor_elements_is_read_one_more_is_refused(path):
    limits = DEFAULT_LIMITS.replace(max_tensor_elements=16)
    check_read(spell({"w": u8([16])}, path), path, limits, {"w": ("U8", (16,), 16, 0)})
    assert refused(spell({"w": u8([17])}, path), limits) == (
        f"{NAME}: tensor 'w': dimension 17 is over the limit of 16 elements")


@pytest.mark.parametrize("path", PATHS)
def test_a_product_of_max_tensor_elements_is_read_one_more_is_refused(path):
    limits = DEFAULT_LIMITS.replace(max_tensor_elements=16)
    check_read(spell({"w": u8([1, 4, 4])}, path), path, limits, {"w": ("U8", (1, 4, 4), 16, 0)})
    # every dimension is within the limit, the product is not (a dimension of 1 counts like any other)
    assert refused(spell({"w": u8([1, 4, 5])}, path), limits) == (
        f"{NAME}: tensor 'w': shape [1, 4, 5] has more than 16 elements (limit max_tensor_elements)")


def test_a_dimension_of_max_tensor_elements_on_an_entry_of_unknown_dtype():
    limits = DEFAULT_LIMITS.replace(max_tensor_elements=16)
    header = read(json.dumps({"w": {"dtype": "X9", "shape": [16], "data_offsets": [0, 3]}}).encode(), limits)
    assert header.tensors["w"].shape == (16,) and header.data_length == 3
    raw = json.dumps({"w": {"dtype": "X9", "shape": [17], "data_offsets": [0, 3]}}).encode()
    assert refused(raw, limits) == f"{NAME}: tensor 'w': dimension 17 is over the limit of 16 elements"


# ------------------------------------------------------------------------------------------------ max_tensors
@pytest.mark.parametrize("path", PATHS)
def test_max_tensors_entries_are_read_one_more_is_refused(path):
    limits = DEFAULT_LIMITS.replace(max_tensors=3)
    extra = 1 if path == "loop" else 0  # the loop's unknown-dtype entry is a tensor too
    header = {f"t{i}": u8([2], 2 * i) for i in range(3 - extra)}
    check_read(spell(header, path), path, limits, {f"t{i}": ("U8", (2,), 2, 2 * i) for i in range(3 - extra)})
    header = {f"t{i}": u8([2], 2 * i) for i in range(4 - extra)}
    assert refused(spell(header, path), limits) == f"{NAME}: 4 tensors, over the limit of 3 (limit max_tensors)"


# --------------------------------------------------------------------- key/value pairs: max_tensors, max_kv
def test_the_pair_budget_of_a_header_is_four_per_tensor_plus_max_kv():
    """4 pairs per tensor (2 spare tensors) plus max_kv: with max_tensors=1, max_kv=2 that is 4 * 3 + 2 = 14."""
    limits = DEFAULT_LIMITS.replace(max_tensors=1, max_kv=2)
    # the name's pair, dtype, shape, data_offsets and 10 extra fields: 14 pairs
    entry = {**u8([2]), **{f"x{i}": i for i in range(10)}}
    header = read(json.dumps({"w": entry}).encode(), limits)
    assert header.tensors["w"].shape == (2,) and header.tensors["w"].nbytes == 2
    assert header.warnings == ["1 tensor entries carry fields other than dtype/shape/data_offsets (first: 'w'); "
                               "ignored"]
    entry["x10"] = 10
    assert refused(json.dumps({"w": entry}).encode(), limits) == (
        f"{NAME}: header: 15 JSON key/value pairs, over the limit of 14 (limits max_tensors, max_kv)")


def test_one_extra_field_is_a_warning():
    header = read(json.dumps({"w": {**u8([2]), "note": "x"}}).encode())
    assert header.tensors["w"].nbytes == 2
    assert header.warnings == ["1 tensor entries carry fields other than dtype/shape/data_offsets (first: 'w'); "
                               "ignored"]


@pytest.mark.parametrize("path", ["compact", "columns"])
def test_max_kv_metadata_entries_are_read(path):
    limits = DEFAULT_LIMITS.replace(max_kv=2)
    metadata = {"format": "pt", "producer": "test"}
    raw = spell({"__metadata__": metadata, "w": u8([2])}, path)
    check_read(raw, path, limits, {"w": ("U8", (2,), 2, 0)})
    assert read(raw, limits).metadata == metadata


# ------------------------------------------------------------------------------------------- max_json_nesting
@pytest.mark.parametrize("path", PATHS)
def test_a_header_needs_max_json_nesting_of_three(path):
    """The entries' lists are at depth 3: a nesting limit of 3 reads the header, 2 refuses it on every path."""
    check_read(spell({"w": u8([2])}, path), path, DEFAULT_LIMITS.replace(max_json_nesting=3),
               {"w": ("U8", (2,), 2, 0)})
    assert refused(spell({"w": u8([2])}, path), DEFAULT_LIMITS.replace(max_json_nesting=2)) == (
        f"{NAME}: header: JSON nested deeper than 2 levels (limit max_json_nesting)")


# -------------------------------------------------------------------------------------- offsets: 2**64 - 1
BIG = DEFAULT_LIMITS.replace(max_tensor_elements=2**64)


@pytest.mark.parametrize("path", PATHS)
def test_data_may_end_at_2_64_minus_1(path):
    """u64 offsets: a tensor of (2**32 - 1)(2**32 + 1) = 2**64 - 1 bytes ends at the largest one."""
    shape = [2**32 - 1, 2**32 + 1]
    raw = spell({"w": {"dtype": "U8", "shape": shape, "data_offsets": [0, 2**64 - 1]}}, path)
    check_read(raw, path, BIG, {"w": ("U8", tuple(shape), 2**64 - 1, 0)})
    assert read(raw, BIG).data_length == 2**64 - 1


@pytest.mark.parametrize("path", PATHS)
def test_data_may_not_end_at_2_64(path):
    """One byte more does not fit in 64 bits, also when an empty tensor before it ends at 0."""
    raw = spell({"a": u8([0]), "w": {"dtype": "U8", "shape": [2**32, 2**32], "data_offsets": [0, 2**64]}}, path)
    assert refused(raw, BIG) == f"{NAME}: tensor 'w': data_offsets end 18446744073709551616 does not fit in 64 bits"


def test_an_entry_of_unknown_dtype_may_end_at_2_64_minus_1():
    header = read(json.dumps({"w": {"dtype": "X9", "shape": [1], "data_offsets": [0, 2**64 - 1]}}).encode())
    assert header.data_length == 2**64 - 1 and header.tensors["w"].offset == 8 + header.header_length
    raw = json.dumps({"w": {"dtype": "X9", "shape": [1], "data_offsets": [0, 2**64]}}).encode()
    assert refused(raw) == f"{NAME}: tensor 'w': data_offsets end 18446744073709551616 does not fit in 64 bits"


@pytest.mark.parametrize("path", ["columns", "loop"])
def test_a_float_begin_offset_is_refused(path):
    """0.0 compares like 0 but is not an integer (the compact spelling never matches it)."""
    raw = spell({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0.0, 4]}}, path)
    assert refused(raw) == f"{NAME}: tensor 'w': data_offsets must be two non-negative integers, found [0.0, 4]"


# ------------------------------------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("path", ["compact", "columns"])
def test_every_whole_byte_dtype_at_once_stays_on_the_fast_path(path):
    dtypes = [d for d, bits in DTYPE_BITS.items() if bits % 8 == 0]
    header, expected, at = {}, {}, 0
    for i, dtype in enumerate(dtypes):
        size = 3 * DTYPE_BITS[dtype] // 8
        header[f"t{i}"] = {"dtype": dtype, "shape": [3], "data_offsets": [at, at + size]}
        expected[f"t{i}"] = (dtype, (3,), size, at)
        at += size
    check_read(spell(header, path), path, DEFAULT_LIMITS, expected)


def test_a_dtype_of_64_characters_is_kept_one_more_is_refused():
    header = read(json.dumps({"w": {"dtype": "X" * 64, "shape": [2], "data_offsets": [0, 7]}}).encode())
    assert header.tensors["w"].dtype == "X" * 64 and header.data_length == 7
    assert header.warnings == [f"unknown dtype {'X' * 64!r} in 1 tensor(s) (first: 'w'); kept verbatim, its byte "
                               "size not checked"]
    raw = json.dumps({"w": {"dtype": "X" * 65, "shape": [2], "data_offsets": [0, 7]}}).encode()
    # the 67-character repr is cut to 57 characters and "..."
    assert refused(raw) == f"{NAME}: tensor 'w': dtype must be a short string, found '{'X' * 56}..."


def test_an_unknown_dtype_with_a_lone_surrogate_is_refused():
    raw = b'{"w":{"dtype":"\\ud800","shape":[2],"data_offsets":[0,2]}}'
    assert refused(raw) == f"{NAME}: tensor 'w': dtype holds a lone surrogate"


@pytest.mark.parametrize(("length", "shown"), [(58, "'" + "s" * 58 + "'"), (59, "'" + "s" * 56 + "...")],
                         ids=["repr-60-whole", "repr-61-cut"])
def test_a_bad_value_is_quoted_whole_up_to_60_characters(length, shown):
    """A repr of 60 characters is shown whole; of 61, cut to 57 and "..." (60 again)."""
    raw = json.dumps({"w": {"dtype": "U8", "shape": "s" * length, "data_offsets": [0, 2]}}).encode()
    assert refused(raw) == f"{NAME}: tensor 'w': shape must be a list, found {shown}"
    assert len(shown) == 60


# ------------------------------------------------------------------------------------ the length prefix
def write(tmp_path, data: bytes):
    path = tmp_path / NAME
    path.write_bytes(data)
    return LocalFileSource(path)


def read_file(tmp_path, data: bytes):
    with write(tmp_path, data) as source:
        return read_safetensors_header(source)


def refused_file(tmp_path, data: bytes) -> str:
    with pytest.raises(InputError) as caught:
        read_file(tmp_path, data)
    return str(caught.value)


def test_nine_bytes_ending_in_a_brace_look_like_safetensors():
    assert looks_like_safetensors(struct.pack("<Q", 1) + b"{")
    assert not looks_like_safetensors(struct.pack("<Q", 1))
    assert not looks_like_safetensors(struct.pack("<Q", 1) + b"[")


def test_a_file_of_exactly_eight_bytes_has_a_length_and_no_header(tmp_path):
    assert refused_file(tmp_path, struct.pack("<Q", 5)) == (
        f"{tmp_path / NAME}: offset 0: header length 5 runs past the end of the 8-byte file")
    assert refused_file(tmp_path, struct.pack("<Q", 5)[:7]) == (
        f"{tmp_path / NAME}: file is 7 bytes, too short for the 8-byte header length")


def test_a_header_one_byte_longer_than_the_file_runs_past_its_end(tmp_path):
    raw = b'{"a":1}  '
    assert refused_file(tmp_path, struct.pack("<Q", len(raw) + 1) + raw) == (
        f"{tmp_path / NAME}: offset 0: header length 10 runs past the end of the 17-byte file")


def test_the_smallest_header_is_two_bytes(tmp_path):
    header = read_file(tmp_path, struct.pack("<Q", 2) + b"{}")
    assert (dict(header.tensors), header.metadata, header.header_length, header.data_length) == ({}, {}, 2, 0)
    assert header.warnings == []
    assert refused_file(tmp_path, struct.pack("<Q", 1) + b"{") == (
        f"{tmp_path / NAME}: offset 0: header length 1 is too small for a JSON object")


def test_error_messages_name_the_path_and_place():
    """The helpers' premise: ``refused`` returns the whole message (path, place, problem)."""
    message = refused(b'{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,3]}}')
    assert re.fullmatch(rf"{re.escape(NAME)}: tensor 'w': data_offsets \[0, 3\] hold 3 bytes but shape \[2\] of "
                        r"U8 needs 2", message)
