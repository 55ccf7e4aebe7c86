"""Mutation fuzzing of the GGUF header reader: any exception other than InputError is a bug.

Valid files (one from gguf-py's GGUFWriter with a tokenizer, one hand-assembled, and the real
llama.cpp vocabulary file's first 64 KiB) are damaged by bit flips, truncation, overwritten fields
(huge counts, lengths, type ids) and inserted bytes. When the reader accepts a mutant, what it
returns must still be consistent. The seeds, mutations and property are in tests/support/gguf_fuzz.py; a longer
run: ``python bench/fuzz_gguf.py --examples N``.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings

from qcheck.errors import InputError
from qcheck.readers.gguf import read_gguf_header
from support.gguf_fuzz import assert_consistent, mutants, seed_files
from support.gguf_helpers import BytesSource, valid_raw

SEEDS = seed_files()


def _read(data: bytes) -> None:
    try:
        header = read_gguf_header(BytesSource(data, "fuzz.gguf"))
    except InputError as exc:
        assert str(exc).startswith("fuzz.gguf: ")
        return
    assert_consistent(header, len(data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutants())
def test_mutated_headers_give_input_error_or_a_consistent_header(data: bytes) -> None:
    _read(data)


def test_seeds_are_valid() -> None:
    for seed in SEEDS[:2]:
        header = read_gguf_header(BytesSource(seed, "seed.gguf"))
        assert_consistent(header, len(seed))
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
