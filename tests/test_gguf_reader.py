"""The GGUF header reader on real files: written by gguf-py's GGUFWriter, and one made by llama.cpp."""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGUFValueType

from qcheck.classify.gguf import classify_gguf
from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Checkpoint
from qcheck.readers import binary
from qcheck.readers import gguf_tables as tables
from qcheck.readers.gguf import (
    ArraySummary,
    load_gguf,
    read_gguf_file,
    read_gguf_header,
    split_info,
)
from qcheck.readers.gguf_meta import model_keys
from qcheck.source import LocalFileSet, LocalFileSource
from support.gguf_helpers import (
    BytesSource,
    Q,
    RawGGUF,
    gguf_string,
    kv_array,
    kv_scalar,
    tensor_info,
    valid_raw,
    write_gguf,
)

DATA = Path(__file__).parent / "data"
VOCAB = DATA / "ggml-vocab-llama-spm.gguf"

MIXED = [
    ("token_embd.weight", (64, 256), Q.Q4_K),
    ("blk.0.attn_q.weight", (256, 256), Q.Q8_0),
    ("blk.0.attn_k.weight", (64, 256), Q.Q4_0),
    ("blk.0.ffn_down.weight", (256, 256), Q.Q6_K),
    ("blk.0.attn_norm.weight", (256,), Q.F32),
    ("blk.1.ffn_gate_exps.weight", (2, 32, 64), Q.MXFP4),
    ("blk.1.attn_v.weight", (32, 64), Q.BF16),
    ("blk.1.attn_output.weight", (4, 64), Q.NVFP4),
    ("output.weight", (4, 64), Q.F16),
]


def expected_nbytes(shape: tuple[int, ...], qtype: Q) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mixed") / "mixed.gguf"
    write_gguf(path, MIXED, file_type=int(gguf.LlamaFileType.MOSTLY_Q4_K_M), vocab=40,
               kv={"test.u8": (GGUFValueType.UINT8, 200), "test.i8": (GGUFValueType.INT8, -7),
                   "test.u16": (GGUFValueType.UINT16, 65535), "test.i16": (GGUFValueType.INT16, -300),
                   "test.i32": (GGUFValueType.INT32, -70000), "test.u64": (GGUFValueType.UINT64, 2**64 - 1),
                   "test.i64": (GGUFValueType.INT64, -(2**63)), "test.f32": (GGUFValueType.FLOAT32, 0.5),
                   "test.f64": (GGUFValueType.FLOAT64, 1e300), "test.bool": True,
                   "test.str": "héllo ✓", "test.floats": [1.5, -2.0]})
    return path


def test_every_tensor_field_matches_what_was_written(mixed: Path) -> None:
    header = read_gguf_file(mixed)
    assert header.version == 3
    assert header.alignment == 32
    assert [t.name for t in header.tensors] == [name for name, _, _ in MIXED]
    for t, (name, shape, qtype) in zip(header.tensors, MIXED, strict=True):
        assert t.dtype == qtype.name, name
        assert t.shape == shape, name
        assert t.nbytes == expected_nbytes(shape, qtype), name
        assert t.offset % 32 == 0
    assert header.tensors[0].offset == header.data_offset
    assert header.data_offset % 32 == 0 and 0 <= header.data_offset - header.header_bytes < 32
    assert header.file_size == mixed.stat().st_size
    assert header.warnings == []


def test_agrees_with_gguf_py_reader(mixed: Path) -> None:
    ours = read_gguf_file(mixed)
    theirs = gguf.GGUFReader(mixed)
    assert ours.data_offset == theirs.data_offset
    assert len(ours.tensors) == len(theirs.tensors)
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert a.name == b.name
        assert a.dtype == b.tensor_type.name
        assert a.shape == tuple(int(x) for x in reversed(b.shape))
        assert a.nbytes == int(b.n_bytes)
        assert a.offset == int(b.data_offset)
    theirs_keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == theirs_keys


def test_scalar_values_and_types_round_trip(mixed: Path) -> None:
    h = read_gguf_file(mixed)
    md, types = h.metadata, h.value_types
    assert md["test.u8"] == 200 and types["test.u8"] == "UINT8"
    assert md["test.i8"] == -7 and types["test.i8"] == "INT8"
    assert md["test.u16"] == 65535 and md["test.i16"] == -300
    assert md["test.i32"] == -70000 and types["test.i32"] == "INT32"
    assert md["test.u64"] == 2**64 - 1 and md["test.i64"] == -(2**63)
    assert md["test.f32"] == 0.5 and types["test.f32"] == "FLOAT32"
    assert md["test.f64"] == 1e300 and types["test.f64"] == "FLOAT64"
    assert md["test.bool"] is True and types["test.bool"] == "BOOL"
    assert md["test.str"] == "héllo ✓"
    assert md["test.floats"] == [1.5, -2.0] and types["test.floats"] == "ARRAY[FLOAT32]"
    assert md["general.architecture"] == "llama"
    assert md["general.file_type"] == 15 and types["general.file_type"] == "UINT32"
    assert md["general.quantization_version"] == 2
    # a small vocabulary is kept as lists
    assert md["tokenizer.ggml.tokens"] == [f"tok{i}" for i in range(40)]
    assert md["tokenizer.ggml.token_type"] == [1] * 40
    assert types["tokenizer.ggml.tokens"] == "ARRAY[STRING]"


def test_empty_and_bool_arrays() -> None:
    raw = valid_raw(1)
    raw.kvs += [kv_array("e.u8", GGUFValueType.UINT8, []), kv_array("e.str", GGUFValueType.STRING, []),
                kv_array("flags", GGUFValueType.BOOL, [1, 0, 1]), kv_array("names", GGUFValueType.STRING, ["x", "ÿ"])]
    h = read_gguf_header(BytesSource(raw.build()))
    assert h.metadata["e.u8"] == [] and h.value_types["e.u8"] == "ARRAY[UINT8]"
    assert h.metadata["e.str"] == [] and h.value_types["e.str"] == "ARRAY[STRING]"
    assert h.metadata["flags"] == [True, False, True]
    assert h.metadata["names"] == ["x", "ÿ"]
    assert len(h.tensors) == 1


def test_large_arrays_are_summarised_unless_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    write_gguf(path, [("a.weight", (4, 32), Q.F32)], vocab=3000)
    h = read_gguf_file(path)
    tokens = h.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, ArraySummary)
    assert (tokens.element_type, tokens.count) == ("STRING", 3000)
    merges = h.metadata["tokenizer.ggml.merges"]
    assert isinstance(merges, ArraySummary) and merges.count == 1500
    assert h.metadata["tokenizer.ggml.token_type"] == ArraySummary("INT32", 3000, h.metadata["tokenizer.ggml.token_type"].offset)
    # the summary offset points at the first element: its length prefix, then "tok0"
    with LocalFileSource(path) as src:
        first = src.read_at(tokens.offset, 12)
    assert first == struct.pack("<Q", 4) + b"tok0"
    asked = read_gguf_file(path, materialize=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"))
    assert asked.metadata["tokenizer.ggml.tokens"] == [f"tok{i}" for i in range(3000)]
    assert asked.metadata["tokenizer.ggml.token_type"] == [1] * 3000
    assert isinstance(asked.metadata["tokenizer.ggml.merges"], ArraySummary)
    assert asked.tensors == h.tensors
    assert model_keys(h.metadata).vocab_size == 3000


def test_real_llama_cpp_vocab_file() -> None:
    """A file written by llama.cpp itself (tests/data/README.md says where it comes from)."""
    h = read_gguf_file(VOCAB)
    md = h.metadata
    assert h.version == 3
    assert h.tensors == []
    assert h.file_size == 723_869 == h.header_bytes
    assert h.data_offset == 723_872  # aligned to 32, past the end: no tensor data
    assert len(md) == 22
    keys = model_keys(md)
    assert (keys.architecture, keys.name) == ("llama", "llama-spm") and md["general.name"] == "llama-spm"
    assert keys.context_length == 4096
    assert keys.block_count == 32
    assert keys.head_count_kv == 32 and keys.head_count_kv_per_layer is None
    assert md["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert keys.vocab_size == 32_000 and keys.warnings == []
    assert md["tokenizer.ggml.model"] == "llama"
    assert md["tokenizer.ggml.add_bos_token"] is True and md["tokenizer.ggml.add_eos_token"] is False
    assert md["tokenizer.ggml.bos_token_id"] == 1 and md["tokenizer.ggml.eos_token_id"] == 2
    for key, etype in (("tokenizer.ggml.tokens", "STRING"), ("tokenizer.ggml.scores", "FLOAT32"),
                       ("tokenizer.ggml.token_type", "INT32")):
        assert isinstance(md[key], ArraySummary)
        assert (md[key].element_type, md[key].count) == (etype, 32_000)
    assert h.warnings == []
    full = read_gguf_file(VOCAB, materialize=("tokenizer.ggml.tokens", "tokenizer.ggml.scores"))
    tokens = full.metadata["tokenizer.ggml.tokens"]
    assert len(tokens) == 32_000
    assert tokens[:4] == ["<unk>", "<s>", "</s>", "<0x00>"]
    assert tokens[-1] == "给"
    assert len(full.metadata["tokenizer.ggml.scores"]) == 32_000
    ckpt = load_gguf(LocalFileSet(DATA), VOCAB.name)
    assert ckpt.container == "gguf" and ckpt.tensors == {}
    insp = classify_gguf(ckpt)
    assert insp.quantization.gguf_file_type == "F16" and not any("guessed" in w for w in insp.warnings)
    assert ckpt.files[0].size_bytes == 723_869 and ckpt.files[0].kind == "gguf"


def test_same_result_with_tiny_buffer_chunks(monkeypatch: pytest.MonkeyPatch, mixed: Path) -> None:
    """Every field that crosses a refill boundary must read the same as with the normal chunks."""
    normal_vocab = read_gguf_file(VOCAB, materialize=("tokenizer.ggml.tokens", "tokenizer.ggml.scores"))
    normal_mixed = read_gguf_file(mixed)
    monkeypatch.setattr(binary, "MIN_CHUNK", 1)
    monkeypatch.setattr(binary, "MAX_CHUNK", 7)
    tiny_vocab = read_gguf_file(VOCAB, materialize=("tokenizer.ggml.tokens", "tokenizer.ggml.scores"))
    assert tiny_vocab.metadata == normal_vocab.metadata
    assert read_gguf_file(VOCAB).metadata["tokenizer.ggml.tokens"].count == 32_000
    assert read_gguf_file(mixed) == normal_mixed


class CountingSource:
    """A ByteSource that records every read, like an HTTP range request log."""

    def __init__(self, inner: LocalFileSource | BytesSource, size_known: bool = True):
        self.inner = inner
        self.name = inner.name
        self.size = inner.size if size_known else None
        self.calls: list[tuple[int, int]] = []

    def read_at(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        return self.inner.read_at(offset, length)

    def close(self) -> None:
        self.inner.close()


def test_reads_grow_geometrically_and_stop_at_the_header() -> None:
    src = CountingSource(LocalFileSource(VOCAB))
    read_gguf_header(src)
    lengths = [length for _, length in src.calls]
    # 64 KiB, 128 KiB, 256 KiB, then the rest of the 707 KiB header: four reads, never re-reading a byte
    # (a refill starts where the buffer ended, or later when a skipped string ran past it)
    assert lengths[:3] == [65536, 131072, 262144]
    assert len(src.calls) == 4
    ends = [off + length for off, length in src.calls]
    assert all(src.calls[i + 1][0] >= ends[i] for i in range(3))
    assert sum(lengths) <= VOCAB.stat().st_size


def test_header_only_prefix_with_unknown_size(mixed: Path) -> None:
    """Over a source of unknown size (a stream), a header-only prefix reads fine: data is never touched."""
    full = read_gguf_file(mixed)
    prefix = mixed.read_bytes()[: full.header_bytes]
    src = CountingSource(BytesSource(prefix, "prefix.gguf"), size_known=False)
    h = read_gguf_header(src)
    assert h.file_size is None
    assert h.tensors == full.tensors
    assert h.metadata == full.metadata
    # the same prefix as a file of known size is a truncated file
    with pytest.raises(InputError, match=r"token_embd.weight.*past the end of the file"):
        read_gguf_header(BytesSource(prefix, "prefix.gguf"))


def test_cursor_primitives_and_bounds() -> None:
    data = struct.pack("<BbHhIiQqfd", 255, -1, 65535, -2, 2**32 - 1, -3, 2**64 - 1, -4, 0.25, -0.5)
    data += struct.pack("<Q", 3) + b"abc" + b"\x01\x02"
    cur = binary.Cursor(BytesSource(data, "p.bin"), 0, None, min_chunk=3, max_chunk=5)
    assert [cur.u8(), cur.i8(), cur.u16(), cur.i16(), cur.u32(), cur.i32(), cur.u64(), cur.i64()] == [
        255, -1, 65535, -2, 2**32 - 1, -3, 2**64 - 1, -4]
    assert cur.f32() == 0.25 and cur.f64() == -0.5
    assert cur.string(10, "s") == "abc"
    assert cur.bool("flag") is True
    assert cur.remaining() == 1
    with pytest.raises(InputError, match=r"offset 54: flag2 is 2, not a bool"):
        cur.bool("flag2")
    assert cur.tell() == len(data)
    with pytest.raises(InputError, match=r"offset 55: .*truncated"):
        cur.u8("one more byte")
    # the header budget is separate from the file size
    budget = binary.Cursor(BytesSource(data, "p.bin"), 0, 10)
    budget.skip(8)
    assert budget.budget() == 2
    with pytest.raises(InputError, match=r"10-byte header limit.*max_header_bytes"):
        budget.u32("field")
    # a length over max_len is refused before anything is read
    over = binary.Cursor(BytesSource(struct.pack("<Q", 100) + b"x" * 100, "s.bin"), 0, None)
    with pytest.raises(InputError, match=r"declares 100 bytes, over the 50-byte limit"):
        over.string(50, "name")


def test_skip_strings_validates_every_length() -> None:
    good = b"".join(struct.pack("<Q", len(s)) + s for s in (b"a", b"bb", b""))
    cur = binary.Cursor(BytesSource(good + b"END", "s"), 0, None, min_chunk=2, max_chunk=4)
    cur.skip_strings(3, 10, "arr")
    assert cur.read(3, "end") == b"END"
    bad = struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 2**40)
    with pytest.raises(InputError, match=r"arr\[1\] declares 1099511627776 bytes"):
        binary.Cursor(BytesSource(bad + b"\0" * 64, "s"), 0, None).skip_strings(2, 2**20, "arr")
    past_end = struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 50) + b"short"
    with pytest.raises(InputError, match=r"arr\[1\].*truncated"):
        binary.Cursor(BytesSource(past_end, "s"), 0, None).skip_strings(2, 1000, "arr")


def test_unknown_and_removed_tensor_types_are_kept_with_a_warning() -> None:
    raw = valid_raw(0)
    raw.tensors = [tensor_info("a.weight", [32, 2], 77, 0), tensor_info("b.weight", [32, 2], 31, 64),
                   tensor_info("c.weight", [8, 4], int(Q.F32), 128)]
    raw.data = b"\0" * 256
    h = read_gguf_header(BytesSource(raw.build(), "u.gguf"))
    a, b, c = h.tensors
    assert (a.dtype, a.nbytes, a.shape) == ("unknown(77)", None, (2, 32))
    assert (b.dtype, b.nbytes) == ("Q4_0_4_4", None)
    assert (c.dtype, c.nbytes, c.offset) == ("F32", 128, h.data_offset + 128)
    assert len(h.warnings) == 2
    assert "ggml type 77" in h.warnings[0] and "size is not known" in h.warnings[0]
    assert "Q4_0_4_4" in h.warnings[1] and "removed" in h.warnings[1]
    assert h.tensor_data_bytes is None
    # the classifier counts every element, and bits/weight over the tensors whose size is known
    insp = classify_gguf(Checkpoint("u.gguf", "gguf", {t.name: t for t in h.tensors}, h.metadata))
    assert insp.parameters == 64 + 64 + 32
    assert insp.quantization.bits_per_weight == 32.0  # c.weight: 32 F32 elements in 128 bytes
    assert any("bits/weight counts only known types" in w for w in insp.warnings)


def test_type_newer_than_gguf_py_is_known() -> None:
    """Q2_0 (ggml id 42, 64-element blocks of 18 bytes) is read even where gguf-py lacks it."""
    raw = valid_raw(0)
    raw.tensors = [tensor_info("q.weight", [128, 3], 42, 0)]
    raw.data = b"\0" * (2 * 3 * 18)
    (t,) = read_gguf_header(BytesSource(raw.build(), "q2.gguf")).tensors
    assert (t.dtype, t.nbytes, t.shape) == ("Q2_0", 108, (3, 128))


def test_custom_alignment(tmp_path: Path) -> None:
    path = tmp_path / "aligned.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(256)
    import numpy as np

    writer.add_tensor("a.weight", np.ones((3, 32), dtype=np.float32))
    writer.add_tensor("b.weight", np.ones((5, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    h = read_gguf_file(path)
    assert h.alignment == 256
    assert h.data_offset % 256 == 0
    assert h.tensors[1].offset - h.tensors[0].offset == 512  # 384 bytes padded to 256
    assert h.data_offset == gguf.GGUFReader(path).data_offset


def test_classifier_numbers_on_a_mixed_file(mixed: Path) -> None:
    ckpt = load_gguf(LocalFileSet(mixed.parent), mixed.name)
    tensors = list(ckpt.tensors.values())
    params = sum(t.numel for t in tensors)
    insp = classify_gguf(ckpt)
    assert insp.parameters == params == sum(math.prod(shape) for _, shape, _ in MIXED) == 170_752
    data_bytes = sum(expected_nbytes(s, q) for _, s, q in MIXED)
    assert insp.quantization.bits_per_weight == pytest.approx(data_bytes * 8 / params, abs=1e-4)
    assert insp.quantization.gguf_file_type == "Q4_K_M" and not any("guessed" in w for w in insp.warnings)
    assert ckpt.dtype_histogram() == {q.name: 1 for _, _, q in MIXED}
    assert ckpt.path == f"{mixed.parent}/{mixed.name}"
    assert [t.file for t in tensors] == [mixed.name] * len(MIXED)
    assert ckpt.size_bytes == mixed.stat().st_size


def test_file_type_guess_when_the_key_is_absent(tmp_path: Path) -> None:
    path = tmp_path / "guess.gguf"
    write_gguf(path, [("blk.0.a.weight", (4, 256), Q.Q4_K), ("blk.0.b.weight", (4, 256), Q.Q4_K),
                      ("blk.0.c.weight", (4, 256), Q.Q6_K), ("blk.0.norm.weight", (256,), Q.F32)])
    ckpt = load_gguf(LocalFileSet(tmp_path), path.name)
    assert "general.file_type" not in ckpt.metadata
    insp = classify_gguf(ckpt)
    assert insp.quantization.gguf_file_type == "Q4_K_M"
    assert "general.file_type is absent; guessed Q4_K_M from the tensor types as llama.cpp does" in insp.warnings
    assert tables.llama_type_counts((t.name, t.dtype) for t in ckpt.tensors.values()) == {
        "Q6_K": 1, "F32": 1, "Q4_K": 2}


@pytest.mark.parametrize(("counts", "expected"), [
    ({"Q3_K": 5, "F32": 2}, "Q3_K_M"), ({"Q5_K": 5}, "Q5_K_M"), ({"Q4_K": 9, "Q6_K": 3}, "Q4_K_M"),
    ({"Q8_0": 3, "F32": 2}, "Q8_0"), ({"BF16": 7}, "BF16"), ({"F16": 7}, "F16"), ({"F32": 7}, "F32"),
    ({"IQ4_XS": 4}, "IQ4_XS"), ({"NVFP4": 4}, "NVFP4"), ({"Q1_0": 4}, "Q1_0"), ({"TQ2_0": 4}, "TQ2_0"),
    # no case in llama.cpp's switch: the guess falls back to ALL_F32
    ({"MXFP4": 4, "F32": 1}, "F32"), ({"Q8_K": 4}, "F32"), ({"unknown(77)": 4}, "F32"), ({"I32": 3}, "F32"),
    # ties: the first maximum in dict order
    ({"Q8_0": 2, "Q4_0": 2}, "Q8_0"), ({"Q4_0": 2, "Q8_0": 2}, "Q4_0"),
])
def test_guess_table(counts: dict[str, int], expected: str) -> None:
    assert tables.file_type_name(None, counts) == (expected, True)


def test_guess_derivation_matches_llama_cpp_switch() -> None:
    """The derived rule gives exactly the cases of llama.cpp's ``switch (type_max)`` (@0c1e570)."""
    llama_cpp_cases = {
        "F32": "F32", "F16": "F16", "BF16": "BF16", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0",
        "Q5_1": "Q5_1", "Q8_0": "Q8_0", "Q2_K": "Q2_K", "Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M",
        "Q6_K": "Q6_K", "TQ1_0": "TQ1_0", "TQ2_0": "TQ2_0", "IQ2_XXS": "IQ2_XXS", "IQ2_XS": "IQ2_XS",
        "IQ2_S": "IQ2_S", "IQ3_XXS": "IQ3_XXS", "IQ1_S": "IQ1_S", "IQ1_M": "IQ1_M", "IQ4_NL": "IQ4_NL",
        "IQ4_XS": "IQ4_XS", "IQ3_S": "IQ3_S", "NVFP4": "NVFP4", "Q1_0": "Q1_0", "Q2_0": "Q2_0",
    }
    for type_name in tables.TENSOR_TYPE_IDS:
        assert tables.guess_file_type(type_name) == llama_cpp_cases.get(type_name, "F32"), type_name


def test_declared_file_type_names() -> None:
    assert tables.file_type_name(15, {"F32": 100}) == ("Q4_K_M", False)
    assert tables.file_type_name(0, {}) == ("F32", False)
    assert tables.file_type_name(38, {}) == ("MXFP4_MOE", False)
    assert tables.file_type_name(32, {}) == ("BF16", False)
    assert tables.file_type_name(41, {}) == ("Q2_0", False)
    assert tables.file_type_name(999, {"Q4_0": 1}) == ("unknown(999)", False)
    assert tables.file_type_name(1024 | 7, {}) == ("Q8_0", True)
    assert tables.file_type_name(None, {}) == (None, False)
    assert tables.file_type_display("Q4_K_M") == "Q4_K - Medium"
    assert tables.file_type_display("F32", guessed=True) == "(guessed) all F32"
    assert tables.file_type_display("MXFP4_MOE") == "MXFP4 MoE"
    assert tables.bits_per_element("Q4_K") == 4.5 and tables.bits_per_element("unknown(5)") is None


def test_llama_tie_break_follows_its_weight_order() -> None:
    # llama.cpp walks tensors sorted by layer number, then name; the first type to reach the max wins.
    tensors = [("blk.10.a", "Q4_0"), ("blk.2.b", "Q8_0"), ("blk.2.a", "Q8_0"), ("blk.10.b", "Q4_0")]
    counts = tables.llama_type_counts(tensors)
    assert counts == {"Q8_0": 2, "Q4_0": 2} and list(counts) == ["Q8_0", "Q4_0"]
    assert tables.file_type_name(None, counts) == ("Q8_0", True)
    # non-layer tensors (layer -1) come first: output(Q6_K), token_embd(Q4_0), blk.0.x(Q4_0) -> Q4_0 reaches 2 first
    counts = tables.llama_type_counts([("blk.0.x", "Q4_0"), ("output.weight", "Q6_K"), ("blk.0.y", "Q6_K"),
                                       ("token_embd.weight", "Q4_0")])
    assert list(counts) == ["Q4_0", "Q6_K"]
    # the same tensors in a different file order give the same answer
    counts = tables.llama_type_counts([("blk.0.y", "Q6_K"), ("token_embd.weight", "Q4_0"), ("blk.0.x", "Q4_0"),
                                       ("output.weight", "Q6_K")])
    assert tables.file_type_name(None, counts) == ("Q4_0", True)


def test_tables_come_from_the_installed_gguf_package() -> None:
    assert tables.TENSOR_TYPES[int(Q.Q4_K)] == ("Q4_K", 256, 144)
    assert tables.TENSOR_TYPES[int(Q.MXFP4)] == ("MXFP4", 32, 17)
    for qtype, (block, size) in GGML_QUANT_SIZES.items():
        assert tables.tensor_type_sizes(int(qtype)) == (block, size)
    assert tables.FILE_TYPE_NAMES[int(gguf.LlamaFileType.MOSTLY_Q4_K_M)] == "Q4_K_M"
    assert tables.FILE_TYPE_NAMES[int(gguf.LlamaFileType.ALL_F32)] == "F32"
    assert tables.value_type_name(8) == "STRING" and tables.value_type_name(99) == "unknown(99)"


def test_reader_imports_neither_numpy_nor_gguf_init() -> None:
    code = ("import sys; import qcheck.readers.gguf as g; g.read_gguf_file(sys.argv[1]); "
            "print('numpy' in sys.modules, 'gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(VOCAB)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------------- split sets
@pytest.fixture()
def split_dir(tmp_path: Path) -> Path:
    write_gguf(tmp_path / "m.gguf", [("blk.0.a.weight", (4, 32), Q.F32), ("blk.0.b.weight", (4, 32), Q.Q8_0),
                                     ("blk.1.a.weight", (4, 32), Q.F32)], split_max_tensors=1, file_type=7)
    return tmp_path


def test_split_set_reads_all_shards(split_dir: Path) -> None:
    names = [f"m-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    assert sorted(os.listdir(split_dir)) == names
    for start in names:  # any shard given leads to the whole set
        ckpt = load_gguf(LocalFileSet(split_dir), start)
        assert list(ckpt.tensors) == ["blk.0.a.weight", "blk.0.b.weight", "blk.1.a.weight"]
        assert [t.file for t in ckpt.tensors.values()] == names
        assert [f.name for f in ckpt.files] == names and {f.kind for f in ckpt.files} == {"gguf"}
        assert ckpt.metadata["split.count"] == 3 and ckpt.metadata["split.no"] == 0
        assert ckpt.metadata["split.tensors.count"] == 3
        assert ckpt.metadata["general.file_type"] == 7
        assert ckpt.size_bytes == sum((split_dir / n).stat().st_size for n in names)
    assert split_info("dir/m-00002-of-00003.gguf") == ("dir/m", 2, 3)
    assert split_info("m.gguf") is None


def test_split_missing_shard(split_dir: Path) -> None:
    (split_dir / "m-00003-of-00003.gguf").unlink()
    with pytest.raises(InputError, match=r"incomplete: missing m-00003-of-00003.gguf"):
        load_gguf(LocalFileSet(split_dir), "m-00001-of-00003.gguf")


def test_split_without_first_shard(split_dir: Path) -> None:
    (split_dir / "m-00001-of-00003.gguf").unlink()
    with pytest.raises(InputError, match=r"shard 2 of 3; shard 1 \(m-00001-of-00003.gguf\) is missing"):
        load_gguf(LocalFileSet(split_dir), "m-00002-of-00003.gguf")


def test_split_shards_in_the_wrong_place(split_dir: Path) -> None:
    a, b = split_dir / "m-00002-of-00003.gguf", split_dir / "m-00003-of-00003.gguf"
    tmp = split_dir / "swap"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    with pytest.raises(InputError, match=r"m-00002-of-00003.gguf: split.no is 2, expected 1"):
        load_gguf(LocalFileSet(split_dir), "m-00001-of-00003.gguf")


def test_split_count_disagrees_with_the_name(split_dir: Path) -> None:
    for k in (1, 2, 3):
        shutil.copy(split_dir / f"m-0000{k}-of-00003.gguf", split_dir / f"n-0000{k}-of-00004.gguf")
    shutil.copy(split_dir / "m-00003-of-00003.gguf", split_dir / "n-00004-of-00004.gguf")
    with pytest.raises(InputError, match=r"n-00001-of-00004.gguf: split.count is 3, but the file name says 4"):
        load_gguf(LocalFileSet(split_dir), "n-00001-of-00004.gguf")


def _shard(path: Path, no: int, count: int, tensors: list[str], total: int | None = None) -> None:
    raw = RawGGUF(kvs=[kv_scalar("general.architecture", GGUFValueType.STRING, "llama"),
                       kv_scalar("split.no", GGUFValueType.UINT16, no),
                       kv_scalar("split.count", GGUFValueType.UINT16, count)])
    if total is not None:
        raw.kvs.append(kv_scalar("split.tensors.count", GGUFValueType.INT32, total))
    raw.tensors = [tensor_info(name, [8, 4], int(Q.F32), 128 * i) for i, name in enumerate(tensors)]
    raw.data = b"\0" * (128 * len(tensors))
    path.write_bytes(raw.build())


def test_split_duplicate_tensor_across_shards(tmp_path: Path) -> None:
    _shard(tmp_path / "d-00001-of-00002.gguf", 0, 2, ["a", "b"], total=3)
    _shard(tmp_path / "d-00002-of-00002.gguf", 1, 2, ["b"])
    with pytest.raises(InputError, match=r"d-00002-of-00002.gguf: tensor 'b' is also in d-00001-of-00002.gguf"):
        load_gguf(LocalFileSet(tmp_path), "d-00001-of-00002.gguf")


def test_split_tensor_count_mismatch(tmp_path: Path) -> None:
    _shard(tmp_path / "c-00001-of-00002.gguf", 0, 2, ["a"], total=5)
    _shard(tmp_path / "c-00002-of-00002.gguf", 1, 2, ["b"])
    with pytest.raises(InputError, match=r"split.tensors.count is 5, but the 2 shards hold 2 tensors"):
        load_gguf(LocalFileSet(tmp_path), "c-00002-of-00002.gguf")


def test_split_keys_in_a_plainly_named_file(tmp_path: Path) -> None:
    _shard(tmp_path / "renamed.gguf", 0, 2, ["a"])
    with pytest.raises(InputError, match=r"split.count=2, but its name does not follow"):
        load_gguf(LocalFileSet(tmp_path), "renamed.gguf")


def test_impossible_shard_numbers(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"shard number 3 of 2 is impossible"):
        load_gguf(LocalFileSet(tmp_path), "x-00003-of-00002.gguf")
    with pytest.raises(InputError, match=r"20000 shards is over the limit of 10000"):
        load_gguf(LocalFileSet(tmp_path), "x-00001-of-20000.gguf")


def test_limits_can_be_raised_for_big_metadata(tmp_path: Path) -> None:
    path = tmp_path / "v.gguf"
    write_gguf(path, [("a.weight", (4, 32), Q.F32)], vocab=3000)
    small = Limits().replace(max_array_elements=2000)
    with pytest.raises(InputError, match=r"'tokenizer.ggml.tokens' declares 3000 elements, over the limit of 2000 "
                                         r"\(raise it with --limit max_array_elements=N\)"):
        read_gguf_file(path, small)
    assert read_gguf_file(path, DEFAULT_LIMITS).metadata["tokenizer.ggml.tokens"].count == 3000


def test_version_2_reads_like_version_3() -> None:
    raw = valid_raw()
    raw.version = 2
    h = read_gguf_header(BytesSource(raw.build(), "v2.gguf"))
    assert h.version == 2
    assert [t.name for t in h.tensors] == ["t0.weight", "t1.weight"]
    assert h.metadata["llama.context_length"] == 2048


def test_nested_arrays_are_summarised_or_materialised_on_request() -> None:
    inner = struct.pack("<IQ", GGUFValueType.UINT16, 2) + struct.pack("<HH", 7, 8)
    nested = gguf_string("nested") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.ARRAY, 2) + inner * 2
    raw = valid_raw(1)
    raw.kvs.append(nested)
    data = raw.build()
    h = read_gguf_header(BytesSource(data))
    assert h.metadata["nested"] == ArraySummary("ARRAY", 2, h.metadata["nested"].offset)
    assert h.value_types["nested"] == "ARRAY[ARRAY]"
    assert len(h.tensors) == 1
    asked = read_gguf_header(BytesSource(data), materialize=("nested",))
    assert asked.metadata["nested"] == [[7, 8], [7, 8]]


def test_tensor_data_is_never_read(tmp_path: Path) -> None:
    """A 1 GiB sparse file: every read starts inside the header, and far less than the file is fetched."""
    import numpy as np

    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_token_list([f"t{i}" for i in range(5000)])
    writer.add_tensor_info("blk.0.ffn_up.weight", (16384, 16384), np.dtype(np.float32), 16384 * 16384 * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    os.truncate(path, 2**20 + 16384 * 16384 * 4)
    src = CountingSource(LocalFileSource(path))
    h = read_gguf_header(src)
    assert h.tensors[0].nbytes == 2**30 and h.tensors[0].offset == h.data_offset
    assert all(offset < h.header_bytes for offset, _ in src.calls)
    assert sum(length for _, length in src.calls) <= 2 * 65536
