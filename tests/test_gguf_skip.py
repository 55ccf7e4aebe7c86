"""Tokenizer arrays are skipped by their lengths, never decoded, and the fast walk answers exactly as the checked
one: the same end offset for every valid array, the same error (message and offset) for every bad one, on real
vocabulary files and on arrays cut at every buffer boundary."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcheck.errors import InputError
from qcheck.readers import binary
from qcheck.readers.gguf import ArraySummary, read_gguf_file
from support import cache_entries
from support.gguf_helpers import BytesSource, write_gguf

ROOT = Path(__file__).resolve().parents[1]
REAL_GGUF = [ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf", *sorted((ROOT / "examples").glob("*.gguf"))]


def strings(lengths: list[int], fill: bytes = b"x") -> bytes:
    return b"".join(struct.pack("<Q", n) + fill * n for n in lengths)


def outcome(data: bytes, count: int, max_len: int, *, checked: bool, chunk: int, size_known: bool = True,
            budget: int | None = None) -> tuple[str, object]:
    cur = binary.Cursor(BytesSource(data, "s.gguf", size_known), 0, budget, min_chunk=chunk, max_chunk=4 * chunk)
    try:
        if checked:  # what skip_strings did before the fast walk existed
            cur.ensure_available(8 * count, f"{count} strings of arr")
            cur._skip_strings_checked(count, max_len, "arr")
        else:
            cur.skip_strings(count, max_len, "arr")
    except InputError as exc:
        return "error", str(exc)
    return "end", cur.tell()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(0, 40), max_size=60), chunk=st.integers(1, 64), tail=st.binary(max_size=16),
       size_known=st.booleans())
def test_fast_walk_ends_where_the_checked_walk_ends(lengths: list[int], chunk: int, tail: bytes,
                                                    size_known: bool) -> None:
    data = strings(lengths) + tail
    fast = outcome(data, len(lengths), 1 << 20, checked=False, chunk=chunk, size_known=size_known)
    assert fast == outcome(data, len(lengths), 1 << 20, checked=True, chunk=chunk, size_known=size_known)
    assert fast == ("end", len(data) - len(tail))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=40), chunk=st.integers(1, 64),
       bad=st.data(), max_len=st.integers(0, 60), cut=st.integers(0, 64), size_known=st.booleans(),
       budget=st.one_of(st.none(), st.integers(0, 2000)))
def test_bad_arrays_fail_as_the_checked_walk_fails(lengths: list[int], chunk: int, bad: st.DataObject,
                                                   max_len: int, cut: int, size_known: bool,
                                                   budget: int | None) -> None:
    """Huge or negative-looking lengths, lengths over the limit, truncated data, a tight header budget: the same
    answer, word for word, as the element-by-element walk."""
    index = bad.draw(st.integers(0, len(lengths) - 1))
    hostile = bad.draw(st.sampled_from([2**64 - 1, 2**63, 2**40, 10_000, max_len + 1, 0]))
    data = bytearray(strings(lengths))
    at = sum(8 + n for n in lengths[:index])
    data[at:at + 8] = struct.pack("<Q", hostile)
    data = bytes(data[:max(0, len(data) - cut)])
    count = len(lengths)
    args = {"chunk": chunk, "size_known": size_known, "budget": budget}
    assert outcome(data, count, max_len, checked=False, **args) == outcome(data, count, max_len, checked=True, **args)


def test_many_strings_over_the_limit_together_but_not_one_by_one() -> None:
    """The whole-array check (total bytes <= max_len) is only a shortcut: an array whose strings are each within
    the limit but together over it is accepted, by the checked walk."""
    data = strings([30] * 10) + b"END"
    cur = binary.Cursor(BytesSource(data), 0, None, min_chunk=16, max_chunk=64)
    cur.skip_strings(10, 40, "arr")
    assert cur.read(3, "end") == b"END"


def test_a_string_over_the_limit_is_named() -> None:
    data = strings([3, 3, 50, 3])
    with pytest.raises(InputError, match=r"offset 22: arr\[2\] declares 50 bytes, over the 40-byte limit"):
        binary.Cursor(BytesSource(data, "s.gguf"), 0, None).skip_strings(4, 40, "arr")


def _no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a string array was decoded or walked element by element")

    monkeypatch.setattr(binary.Cursor, "read_strings", refuse)
    monkeypatch.setattr(binary.Cursor, "_skip_strings_checked", refuse)


def test_tokenizer_arrays_are_skipped_not_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tokens, merges, scores and token_type of a 20,000-token vocabulary become ArraySummary records (count and
    offset) without decoding a string or walking them one checked element at a time."""
    path = write_gguf(tmp_path / "v.gguf", vocab=20_000,
                      kv={"tokenizer.ggml.scores": [float(-i) for i in range(20_000)]})[0]
    _no_decoding(monkeypatch)
    md = read_gguf_file(path).metadata
    tokens, merges = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"]
    assert isinstance(tokens, ArraySummary) and (tokens.element_type, tokens.count) == ("STRING", 20_000)
    assert isinstance(merges, ArraySummary) and merges.count == 10_000
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        assert isinstance(md[key], ArraySummary) and md[key].count == 20_000
    # asked for by name, the tokens are still decoded (bounded by the same limits)
    monkeypatch.undo()
    full = read_gguf_file(path, materialize=("tokenizer.ggml.tokens",)).metadata["tokenizer.ggml.tokens"]
    assert len(full) == 20_000 and all(isinstance(t, str) for t in full)


@pytest.mark.parametrize("path", REAL_GGUF, ids=lambda p: p.name)
def test_inspect_output_is_the_same_with_and_without_the_fast_walk(path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The full ``qcheck inspect --json`` record of real GGUF files (llama.cpp's vocabulary file, the examples)
    is identical whether tokenizer arrays are walked fast or element by element."""
    from click.testing import CliRunner

    from qcheck.cli import cli

    runner = CliRunner()
    fast = runner.invoke(cli, ["inspect", str(path), "--json"])
    monkeypatch.setattr(binary.Cursor, "_walk_strings", lambda self, count: None)
    slow = runner.invoke(cli, ["inspect", str(path), "--json"])
    assert fast.exit_code == slow.exit_code == 0, fast.output
    assert json.loads(fast.output) == json.loads(slow.output)
    assert json.loads(fast.output)["vocab_size"] is not None


# ------------------------------------------------------------------------------- gguf-py's tables, cached
def test_gguf_tables_come_from_the_installed_constants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain tables (tensor type sizes, file types, value types) equal gguf-py's own enums; a second run reads
    them from the data cache without executing constants.py; a damaged entry is recomputed."""
    import sys

    import gguf.constants as constants

    from qcheck import datacache
    from qcheck.readers import gguf_tables

    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("QCHECK_CACHE", raising=False)
    monkeypatch.delitem(sys.modules, "gguf.constants")  # as in a qcheck process: gguf is never imported
    monkeypatch.delitem(sys.modules, gguf_tables._PRIVATE_NAME, raising=False)
    expected = gguf_tables._tables_of(constants)
    assert {row[1] for row in expected["quant"]} >= {"Q4_K", "Q6_K", "MXFP4", "BF16"}
    assert gguf_tables._load_tables() == expected  # executes constants.py, stores the tables
    [entry] = (tmp_path / "data").glob("gguf-constants-*.json")

    def refuse(path: str) -> None:
        raise AssertionError("constants.py was executed although its tables are cached")

    monkeypatch.delitem(sys.modules, gguf_tables._PRIVATE_NAME, raising=False)
    with monkeypatch.context() as m:
        m.setattr(gguf_tables, "_exec_constants", refuse)
        assert gguf_tables._load_tables() == expected
    cache_entries.write(entry, {"format": datacache.FORMAT, "kind": gguf_tables._CACHE_KIND,
                                "key": entry.stem.rsplit("-", 1)[1], "value": {"quant": [[1, "F16"]]}})
    assert gguf_tables._load_tables() == expected
    # what the reader derives from them: every type gguf-py sizes, with its block and byte size
    for qtype, (block, size) in constants.GGML_QUANT_SIZES.items():
        if block and size:
            assert gguf_tables.TENSOR_TYPES[int(qtype)] == (qtype.name, block, size)
    assert gguf_tables.FILE_TYPE_NAMES[int(constants.LlamaFileType.MOSTLY_Q4_K_M)] == "Q4_K_M"


# --------------------------------------------------------------------------------- the GGUF header cache
def _fields(header: object) -> dict:
    from dataclasses import asdict

    return asdict(header)  # type: ignore[call-overload]


@pytest.fixture
def header_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("QCHECK_CACHE", raising=False)
    return tmp_path / "cache" / "data"


def _load(path: Path, limits=None):
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers.gguf import load_gguf
    from qcheck.source import LocalFileSet

    return load_gguf(LocalFileSet(str(path.parent)), path.name, limits or DEFAULT_LIMITS)


def _refuse_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    from qcheck.readers import gguf as gguf_reader

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header was parsed although it is cached")

    monkeypatch.setattr(gguf_reader, "read_gguf_header", refuse)


@pytest.mark.parametrize("name", ["vocab", "model"])
def test_a_kept_header_is_the_parsed_one(tmp_path: Path, header_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                         name: str) -> None:
    """Every field of the header read back from the cache equals the parse: metadata (scalars, small arrays,
    skipped arrays with their offsets), value types, tensors, warnings."""
    from support.gguf_helpers import Q

    path = (ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf" if name == "vocab" else
            write_gguf(tmp_path / "m.gguf", [("token_embd.weight", (64, 256), Q.Q4_K), ("x.weight", (8, 32), Q.F16)],
                       vocab=3000, kv={"general.tags": ["a", "b"]})[0])
    parsed = _load(path)
    assert list(header_cache.glob("gguf-header-*.json"))
    with monkeypatch.context() as m:
        _refuse_parsing(m)
        cached = _load(path)
    assert cached.metadata == parsed.metadata and cached.tensors == parsed.tensors
    assert cached.warnings == parsed.warnings and [f.name for f in cached.files] == [f.name for f in parsed.files]
    summary = cached.metadata["tokenizer.ggml.tokens"]
    assert isinstance(summary, ArraySummary) and summary == parsed.metadata["tokenizer.ggml.tokens"]


def test_a_changed_byte_or_other_limits_are_a_miss(tmp_path: Path, header_cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from qcheck.limits import DEFAULT_LIMITS, Limits

    path = tmp_path / "v.gguf"
    path.write_bytes((ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf").read_bytes())
    _load(path)
    data = bytearray(path.read_bytes())
    at = data.index(b"\xe2\x96\x81", 100_000) + 3  # inside a token string past the first 64 KiB
    data[at] = ord("Q") if data[at] != ord("Q") else ord("R")
    path.write_bytes(bytes(data))
    parses: list[int] = []
    from qcheck.readers import gguf as gguf_reader

    original = gguf_reader.read_gguf_header
    monkeypatch.setattr(gguf_reader, "read_gguf_header", lambda *a, **k: parses.append(1) or original(*a, **k))
    _load(path)
    assert parses == [1]  # same first 64 KiB, other bytes: parsed again
    _load(path, Limits(max_string_bytes=DEFAULT_LIMITS.max_string_bytes - 1))
    assert parses == [1, 1]  # other limits: parsed again (they decide what is accepted)
    _load(path)
    assert parses == [1, 1]  # and the edited file's own entry is used from now on


def test_a_refused_header_is_never_kept(tmp_path: Path, header_cache: Path) -> None:
    from qcheck.limits import Limits

    path = ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf"
    for _ in range(2):
        with pytest.raises(InputError, match="over the 5-byte limit"):
            _load(path, Limits(max_string_bytes=5))
    assert not list(header_cache.glob("gguf-header-*.json")) if header_cache.exists() else True


@pytest.mark.parametrize("damage", ["sha", "tensors", "metadata", "header_bytes", "json"])
def test_a_damaged_header_entry_is_a_miss(tmp_path: Path, header_cache: Path, damage: str) -> None:
    from qcheck import datacache

    path = ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf"
    expected = _load(path)
    [entry_path] = header_cache.glob("gguf-header-*.json")
    entry = cache_entries.read(entry_path)
    value = entry["value"]
    if damage == "sha":
        value["sha256"] = "0" * 64
    elif damage == "tensors":
        value["tensors"] = [["t", "F32", ["4"], 16, 0]]
    elif damage == "metadata":
        value["metadata"]["tokenizer.ggml.tokens"] = {"array_of": "STRING", "count": "many", "offset": 1}
    elif damage == "header_bytes":
        value["header_bytes"] = 10**12
    cache_entries.write(entry_path, "{" if damage == "json" else entry)
    assert entry["format"] == datacache.FORMAT
    again = _load(path)
    assert again.metadata == expected.metadata and again.tensors == expected.tensors


# ------------------------------------------------------------------- a file seen before is not hashed again
def _entry(header_cache: Path) -> tuple[Path, dict]:
    [entry_path] = header_cache.glob("gguf-header-*.json")
    return entry_path, cache_entries.read(entry_path)


def _age_entry(header_cache: Path, seconds: float) -> None:
    """As if the entry had been written ``seconds`` after the file last changed (a file downloaded yesterday)."""
    entry_path, entry = _entry(header_cache)
    entry["value"]["stored_ns"] = max(entry["value"]["identity"][1:3]) + int(seconds * 1e9)
    cache_entries.write(entry_path, entry)


def _count_digests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from qcheck.readers import gguf_cache

    calls: list[int] = []
    original = gguf_cache._digest
    monkeypatch.setattr(gguf_cache, "_digest", lambda *a: calls.append(1) or original(*a))
    return calls


def _copy_vocab(tmp_path: Path) -> Path:
    path = tmp_path / "v.gguf"
    path.write_bytes((ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf").read_bytes())
    return path


def test_an_untouched_file_is_not_hashed_again(tmp_path: Path, header_cache: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = _copy_vocab(tmp_path)
    parsed = _load(path)
    _age_entry(header_cache, 10)
    digests = _count_digests(monkeypatch)
    _refuse_parsing(monkeypatch)
    cached = _load(path)
    assert digests == [] and cached.metadata == parsed.metadata and cached.tensors == parsed.tensors


def test_a_file_changed_in_place_with_its_mtime_put_back_is_hashed_and_missed(
        tmp_path: Path, header_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same size, same modification time (os.utime), other bytes: the change time moved, so the digest decides."""
    path = _copy_vocab(tmp_path)
    _load(path)
    _age_entry(header_cache, 10)
    before = path.stat()
    data = bytearray(path.read_bytes())
    at = data.index(b"\xe2\x96\x81", 100_000) + 3
    data[at] = ord("Q") if data[at] != ord("Q") else ord("R")
    with open(path, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size
    digests = _count_digests(monkeypatch)
    from qcheck.readers import gguf as gguf_reader

    parses: list[int] = []
    original = gguf_reader.read_gguf_header
    monkeypatch.setattr(gguf_reader, "read_gguf_header", lambda *a, **k: parses.append(1) or original(*a, **k))
    _load(path)
    assert digests and parses == [1]


def test_a_file_cached_within_a_clock_tick_of_its_change_is_hashed(tmp_path: Path, header_cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Racy: written and cached within RACY_NS, the identity alone cannot stand for the bytes."""
    path = _copy_vocab(tmp_path)
    _load(path)
    _age_entry(header_cache, 0.5)
    digests = _count_digests(monkeypatch)
    _load(path)
    assert len(digests) == 1


def test_a_hashed_hit_on_a_settled_file_records_its_identity(tmp_path: Path, header_cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached right after a download (racy), hashed on the next run; once the file has settled, that run records
    it, and the run after need not hash."""
    path = _copy_vocab(tmp_path)
    _load(path)
    entry_path, entry = _entry(header_cache)
    entry["value"]["identity"] = None  # an entry written without one (or by a racy run)
    cache_entries.write(entry_path, entry)
    old = time.time_ns() - 60 * 10**9
    os.utime(path, ns=(old, old))
    monkeypatch.setattr("qcheck.readers.gguf_cache.RACY_NS", 0)  # the change time (now) counts as settled
    digests = _count_digests(monkeypatch)
    _load(path)
    assert len(digests) == 1
    assert _entry(header_cache)[1]["value"]["identity"] == list(
        (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ctime_ns, path.stat().st_ino,
         path.stat().st_dev))
    _load(path)
    assert len(digests) == 1


def test_without_a_change_time_every_run_hashes(tmp_path: Path, header_cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Where st_ctime is the creation time (Windows), a put-back mtime could hide a write: no identity is kept and
    the digest decides every time."""
    monkeypatch.setattr("qcheck.source.CHANGE_TIME_TRACKS_WRITES", False)
    path = _copy_vocab(tmp_path)
    _load(path)
    assert _entry(header_cache)[1]["value"]["identity"] is None
    monkeypatch.setattr("qcheck.readers.gguf_cache.RACY_NS", 0)
    digests = _count_digests(monkeypatch)
    _load(path)
    _load(path)
    assert len(digests) == 2
