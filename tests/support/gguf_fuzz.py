"""GGUF header fuzzing, shared by tests/test_gguf_fuzz.py (300 examples) and bench/fuzz_gguf.py (a long run):
the seed files, the values worth writing over a field, the mutation strategy and the consistency property an
accepted mutant must satisfy."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from hypothesis import strategies as st

from qcheck.readers.gguf import GGUFHeader
from support.gguf_helpers import Q, valid_raw, write_gguf

#: llama.cpp's own vocabulary file (tests/data): a real header with a 700 KiB token array
VOCAB_FILE = Path(__file__).resolve().parents[1] / "data" / "ggml-vocab-llama-spm.gguf"

#: field values that hit boundaries: small counts, type ids, powers of two, signed and unsigned maxima
INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 31, 32, 33, 42, 63, 64, 77, 255, 256, 1023, 1024,
               2**15, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63,
               2**64 - 32, 2**64 - 1]


@functools.cache
def seed_files() -> tuple[bytes, bytes, bytes]:
    """A GGUFWriter file (several tensor types, a tokenizer, arrays), a hand-assembled file, and the first
    64 KiB of the real vocabulary file (cut inside its token array: a truncated file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        write_gguf(path, [("token_embd.weight", (8, 256), Q.Q4_K), ("blk.0.attn_q.weight", (4, 64), Q.Q8_0),
                          ("blk.0.norm.weight", (64,), Q.F32), ("blk.0.ffn.weight", (4, 64), Q.BF16)],
                   file_type=15, vocab=24, kv={"test.floats": [0.5, 1.5], "test.flag": True})
        writer_file = path.read_bytes()
    return writer_file, valid_raw().build(), VOCAB_FILE.read_bytes()[:65536]


@st.composite
def mutants(draw: st.DrawFn) -> bytes:
    """A seed damaged 1-4 times: bit flips, boundary values over 1/2/4/8-byte fields, truncation, insertion,
    deletion, within the first 4 KiB (the magic is hit rarely on purpose: a bad magic ends the parse at once)."""
    data = bytearray(draw(st.sampled_from(seed_files())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "field", "field", "truncate", "insert", "delete"]))
        limit = min(len(data), 4096)
        if limit <= 8:
            break
        low = draw(st.sampled_from([8] * 9 + [0]))
        pos = low + draw(st.integers(0, 2**16)) % (limit - low)
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "field":
            width = draw(st.sampled_from([1, 2, 4, 8]))
            value = draw(st.sampled_from(INTERESTING) | st.integers(0, 2**64 - 1)) % (1 << (8 * width))
            data[pos: pos + width] = value.to_bytes(width, "little")
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[pos: pos + draw(st.integers(1, 16))]
    return bytes(data)


def assert_consistent(header: GGUFHeader, size: int) -> None:
    """What an accepted header must satisfy: a known version, a power-of-two alignment, every tensor inside the
    file after the data offset, unique names, positive dimensions, one value type per metadata key."""
    assert header.version in (2, 3)
    assert header.alignment > 0 and header.alignment & (header.alignment - 1) == 0
    assert header.data_offset % header.alignment == 0
    assert header.header_bytes <= size
    names = [t.name for t in header.tensors]
    assert len(names) == len(set(names))
    for t in header.tensors:
        assert t.offset is not None and t.offset >= header.data_offset
        assert t.offset + (t.nbytes or 1) <= size
        assert all(d > 0 for d in t.shape)
        assert len(t.shape) <= 4 and len(t.name.encode()) < 64
    assert len(header.metadata) == len(header.value_types)
