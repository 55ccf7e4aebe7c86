"""The bounded JSON pre-scan on its fast path (no backslash: strings cut by splitting on quotes, in chunks)
agrees with the string-literal regex everywhere, and every bound it enforces still holds on both paths."""

from __future__ import annotations

import json
import random

import pytest

from qcheck.errors import InputError
from qcheck.readers import jsonfile
from qcheck.readers.safetensors import parse_header_bytes


def _regex_outside(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    for m in jsonfile._STRING.finditer(data):
        out += data[pos:m.start()]
        pos = m.end()
    return bytes(out + data[pos:])


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_plain_scan_equals_the_regex_scan(monkeypatch, chunk):
    monkeypatch.setattr(jsonfile, "_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(3000):
        data = bytes(rng.choice(b'"ab[]{}:, ') for _ in range(rng.randint(0, 40)))
        assert jsonfile._outside_strings(data) == _regex_outside(data), data


def _header(entries: int, extra: str = "") -> bytes:
    body = ",".join(f'"t{i}":{{"dtype":"F16","shape":[2],"data_offsets":[{4 * i},{4 * i + 4}]{extra}}}'
                    for i in range(entries))
    return ("{" + body + "}").encode()


class _NoRegex:
    def finditer(self, data):  # pragma: no cover - reaching it is the failure
        raise AssertionError("the string regex walked a header without escapes")


def test_a_header_without_escapes_never_walks_strings_one_by_one(monkeypatch):
    monkeypatch.setattr(jsonfile, "_STRING", _NoRegex())
    header = parse_header_bytes(_header(5000))
    assert len(header.tensors) == 5000 and header.data_length == 20000


@pytest.mark.parametrize("escaped", [False, True])
def test_bounds_hold_on_both_paths(escaped):
    note = ',"note":"a \\"quoted\\" {[word]}"' if escaped else ',"note":"a {[word]}"'
    assert len(parse_header_bytes(_header(3, note)).tensors) == 3  # brackets in strings do not count
    with pytest.raises(InputError, match="nested deeper than 3 levels"):
        parse_header_bytes(_header(2, note + ',"deep":[[1]]'))
    with pytest.raises(InputError, match="JSON objects, over the limit"):
        parse_json_objects = _header(2, note + ',"o":{}')
        jsonfile.parse_json(parse_json_objects, where="header", max_depth=3, max_objects=2)
    with pytest.raises(InputError, match="duplicate key 't0'"):
        parse_header_bytes(_header(2, note).replace(b'"t1"', b'"t0"'))
    assert json.loads(_header(2, note))  # the fixtures themselves are valid JSON
