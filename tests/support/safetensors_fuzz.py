"""safetensors header fuzzing, shared by tests/test_safetensors_fuzz.py and bench/fuzz_safetensors.py (a long
run): valid files, their mutations, and ``check_one``, the two properties on one input (any input gives a header
or an InputError; whatever qcheck accepts, the safetensors library accepts with the same tensors)."""

from __future__ import annotations

import json
import struct

from hypothesis import strategies as st

from qcheck.errors import InputError
from qcheck.readers.safetensors import DTYPE_BITS, read_safetensors_header
from support.gguf_helpers import BytesSource

# dtypes the installed safetensors library can round-trip through ``deserialize``
DTYPES = sorted(DTYPE_BITS)


@st.composite
def valid_files(draw: st.DrawFn) -> bytes:
    """A well-formed safetensors file: contiguous tensors of random dtypes and shapes, optional metadata."""
    count = draw(st.integers(0, 5))
    header: dict = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
    offset = 0
    for index in range(count):
        dtype = draw(st.sampled_from(DTYPES))
        bits = DTYPE_BITS[dtype]
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        numel = 1
        for d in shape:
            numel *= d
        if numel * bits % 8:
            shape = [*shape, 2] if bits == 4 else [*shape, 4]
            numel = numel * (2 if bits == 4 else 4)
        nbytes = numel * bits // 8
        header[f"t{index}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(range(256)) * (offset // 256) + bytes(offset % 256)


#: any JSON value, with integers beyond 64 bits (offsets and shapes that overflow)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    """A valid file damaged once: bytes overwritten, truncated, inserted, appended, reversed, a wrong header
    length, or one value of the JSON header replaced by any JSON value."""
    data = bytearray(draw(valid_files()))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "length", "json", "append", "splice"]))
    if kind == "flip" and data:
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(data) - 1))
            data[pos] = draw(st.integers(0, 255))
    elif kind == "truncate":
        del data[draw(st.integers(0, len(data))):]
    elif kind == "insert":
        pos = draw(st.integers(0, len(data)))
        data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "length":
        data[:8] = struct.pack("<Q", draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, len(data) + 8))))
    elif kind == "append":
        data += draw(st.binary(min_size=1, max_size=16))
    elif kind == "splice":
        a, b = sorted(draw(st.lists(st.integers(0, len(data)), min_size=2, max_size=2)))
        data[a:b] = data[a:b][::-1]
    else:  # rewrite one value of the JSON header
        (n,) = struct.unpack("<Q", bytes(data[:8]))
        header = json.loads(bytes(data[8:8 + n]))
        body = bytes(data[8 + n:])
        if header:
            key = draw(st.sampled_from(sorted(header)))
            target = header[key]
            if isinstance(target, dict) and target and draw(st.booleans()):
                field = draw(st.sampled_from(sorted(target)))
                target[field] = draw(JSON_VALUES)
            else:
                header[key] = draw(JSON_VALUES)
        raw = json.dumps(header).encode()
        data = bytearray(struct.pack("<Q", len(raw)) + raw + body)
    return bytes(data)


def check_one(data: bytes) -> str:
    """Run both properties on one input; return "accepted" or "rejected" (for the bench's counts)."""
    try:
        header = read_safetensors_header(BytesSource(data, "fuzz.safetensors"))
    except InputError:
        return "rejected"
    if any("unknown dtype" in w for w in header.warnings):
        return "accepted"
    from safetensors import deserialize

    loaded = dict(deserialize(data))
    assert set(loaded) == set(header.tensors)
    for name, info in loaded.items():
        assert header.tensors[name].dtype == info["dtype"]
        assert list(header.tensors[name].shape) == list(info["shape"])
        assert header.tensors[name].nbytes == len(info["data"])
    return "accepted"
