"""Mutation fuzzing of the GGUF header reader: any exception other than InputError is a bug.

Valid files (one from gguf-py's GGUFWriter with a tokenizer, one hand-assembled, and the real
llama.cpp vocabulary file's first 64 KiB) are damaged by bit flips, truncation, overwritten fields
(huge counts, lengths, type ids) and inserted bytes. When the reader accepts a mutant, what it
returns must still be consistent. A longer run: ``python bench/fuzz_gguf.py --examples N``.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcheck.errors import InputError
from qcheck.readers.gguf import GGUFHeader, read_gguf_header
from support.gguf_helpers import BytesSource, Q, valid_raw, write_gguf

INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 31, 32, 33, 42, 63, 64, 77, 255, 256, 1023, 1024,
               2**15, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63,
               2**64 - 32, 2**64 - 1]


def _seed_files() -> list[bytes]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "seed.gguf"
        write_gguf(path, [("token_embd.weight", (8, 256), Q.Q4_K), ("blk.0.attn_q.weight", (4, 64), Q.Q8_0),
                          ("blk.0.norm.weight", (64,), Q.F32), ("blk.0.ffn.weight", (4, 64), Q.BF16)],
                   file_type=15, vocab=24, kv={"test.floats": [0.5, 1.5], "test.flag": True})
        writer_file = path.read_bytes()
    vocab = (Path(__file__).parent / "data" / "ggml-vocab-llama-spm.gguf").read_bytes()
    return [writer_file, valid_raw().build(), vocab[:65536]]


SEEDS = _seed_files()


@st.composite
def mutants(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "field", "field", "truncate", "insert", "delete"]))
        limit = min(len(data), 4096)
        if limit <= 8:
            break
        # the magic is hit rarely on purpose (a bad magic ends the parse at once); the rest uniformly
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


def _consistent(header: GGUFHeader, size: int) -> None:
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


def _read(data: bytes) -> None:
    try:
        header = read_gguf_header(BytesSource(data, "fuzz.gguf"))
    except InputError as exc:
        assert str(exc).startswith("fuzz.gguf: ")
        return
    _consistent(header, len(data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutants())
def test_mutated_headers_give_input_error_or_a_consistent_header(data: bytes) -> None:
    _read(data)


def test_seeds_are_valid() -> None:
    for seed in SEEDS[:2]:
        header = read_gguf_header(BytesSource(seed, "seed.gguf"))
        _consistent(header, len(seed))
    # the vocabulary prefix is cut inside its token array: a truncated file
    try:
        read_gguf_header(BytesSource(SEEDS[2], "seed.gguf"))
    except InputError as exc:
        assert "truncated" in str(exc)
    else:  # pragma: no cover - would mean the prefix is not a prefix
        raise AssertionError("a 64 KiB prefix of a 707 KiB header must be reported as truncated")


def test_every_single_truncation_of_the_small_seed() -> None:
    """Exhaustive: each prefix of the hand-assembled file is rejected as truncated, never crashes."""
    seed = SEEDS[1]
    for cut in range(len(seed)):
        try:
            read_gguf_header(BytesSource(seed[:cut], "cut.gguf"))
        except InputError:
            continue
        raise AssertionError(f"prefix of {cut} bytes was accepted")


def test_every_single_byte_overwrite_of_the_header() -> None:
    """Exhaustive over the header of the small seed: each byte set to 0xFF, and each u64 field maxed."""
    seed = SEEDS[1]
    head_len = len(valid_raw().header())
    for pos in range(head_len):
        for mutated in (seed[:pos] + b"\xff" + seed[pos + 1:],
                        seed[:pos] + struct.pack("<Q", 2**64 - 1) + seed[pos + 8:]):
            _read(mutated)
