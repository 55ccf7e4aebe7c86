"""Every row of qcheck's hand-written tables, against a source that does not share their code.

- GGUF tensor and file types: gguf-py's own enums and ``GGML_QUANT_SIZES``; llama.cpp's file-type wording and its
  file-type guess: what the vendored llama.cpp itself prints when it loads a file (llama-cpp-python).
- The nominal bits, group and scale of the pure GGUF file types: each row's bit budget (weights + scales + minima)
  is the block size gguf-py gives for that type.
- safetensors dtype sizes: what safetensors' own deserializer accepts as a tensor's byte length.
- KV-cache element sizes: torch's dtype sizes, ggml's block sizes, and the layouts of the grouped caches.
"""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType

from qcheck.classify import dtypes
from qcheck.classify.gguf import PURE_FILE_TYPES
from qcheck.kvtypes import KV_DTYPE_BYTES, kv_dtype_bytes
from qcheck.readers import gguf_tables as gt
from qcheck.readers.safetensors import DTYPE_BITS
from support.gguf_helpers import write_gguf


# ---------------------------------------------------------------------------------------------- GGUF tables
def test_tensor_types_are_gguf_py_rows():
    expected = {int(q): (q.name, *GGML_QUANT_SIZES[q]) for q in GGMLQuantizationType
                if q in GGML_QUANT_SIZES and min(GGML_QUANT_SIZES[q]) > 0}
    newer = {tid: row for tid, row in gt.TENSOR_TYPES.items() if tid not in expected}
    assert {tid: row for tid, row in gt.TENSOR_TYPES.items() if tid in expected} == expected
    # ids ggml has and this gguf-py lacks: ggml.h's GGML_TYPE_Q2_0 = 42, QK2_0 = 64, {ggml_half d; uint8_t qs[16]}
    assert newer == ({42: ("Q2_0", 64, 2 + 64 * 2 // 8)} if 42 not in expected else {})
    assert {name: tid for tid, (name, _, _) in gt.TENSOR_TYPES.items()} == gt.TENSOR_TYPE_IDS
    for tid, (name, block, size) in gt.TENSOR_TYPES.items():
        assert gt.tensor_type_name(tid) == name
        assert gt.tensor_type_sizes(tid) == (block, size)
        assert gt.bits_per_element(name) == 8 * size / block
    assert (gt.bits_per_element("Q4_K"), gt.bits_per_element("Q8_0"), gt.bits_per_element("F16")) == (4.5, 8.5, 16)
    assert gt.bits_per_element("Q9_Z") is None and gt.tensor_type_sizes(999) is None
    assert [gt.tensor_type_name(i) for i in (4, 5, 31, 36, 999)] == ["Q4_2", "Q4_3", "Q4_0_4_4", "IQ4_NL_4_4",
                                                                     "unknown(999)"]
    assert not set(gt.REMOVED_TENSOR_TYPES) & set(gt.TENSOR_TYPES)


def test_file_types_are_gguf_py_rows():
    expected = {}
    for ft in LlamaFileType:
        if ft.name == "GUESSED":
            assert gt.FILE_TYPE_GUESSED_FLAG == int(ft) == 1024
            continue
        expected[int(ft)] = "F32" if ft.name == "ALL_F32" else ft.name.removeprefix("MOSTLY_")
    assert {fid: n for fid, n in gt.FILE_TYPE_NAMES.items() if fid in expected} == expected
    assert {fid: n for fid, n in gt.FILE_TYPE_NAMES.items() if fid not in expected} == (
        {41: "Q2_0"} if 41 not in expected else {})  # llama.h LLAMA_FTYPE_MOSTLY_Q2_0 = 41
    assert {n: fid for fid, n in gt.FILE_TYPE_NAMES.items()} == gt.FILE_TYPE_IDS
    assert set(gt.FILE_TYPE_DISPLAY) <= set(gt.FILE_TYPE_NAMES.values())


def test_value_types_are_gguf_py_rows_with_struct_sizes():
    assert {vid: name for vid, (name, _, _) in gt.VALUE_TYPES.items()} == {int(v): v.name for v in GGUFValueType}
    for name, fmt, size in gt.VALUE_TYPES.values():
        if name in ("STRING", "ARRAY"):
            assert (fmt, size) == (None, None)
            continue
        assert size == struct.calcsize("<" + fmt)
        kind = {"B": "UINT", "H": "UINT", "I": "UINT", "Q": "UINT", "b": "INT", "h": "INT", "i": "INT", "q": "INT",
                "f": "FLOAT", "d": "FLOAT", "?": "BOOL"}[fmt]
        assert name == (kind if kind == "BOOL" else f"{kind}{8 * size}")
    assert {gt.value_type_name(v) for v in gt.INTEGER_VALUE_TYPES} == {
        f"{s}INT{b}" for s in ("", "U") for b in (8, 16, 32, 64)}
    assert (int(GGUFValueType.STRING), int(GGUFValueType.ARRAY)) == (gt.VT_STRING, gt.VT_ARRAY)
    assert gt.value_type_name(99) == "unknown(99)"
    assert (gt.GGML_MAX_DIMS, gt.GGML_MAX_NAME) == (4, 64)  # ggml.h


#: bits of the scale dtypes the table names
SCALE_BITS = {"float16": 16, "e8m0": 8, "float8_e4m3": 8}


@pytest.mark.parametrize("file_type", sorted(PURE_FILE_TYPES))
def test_pure_file_type_rows_spend_exactly_the_block_gguf_py_gives(file_type):
    """weights + one scale per group (+ one float16 minimum per group for the ``_1`` types) fill the type's block:
    a wrong nominal bit count, group or scale width in a row cannot add up."""
    bits, group, scale, weight = PURE_FILE_TYPES[file_type]
    tensor_type = {"MXFP4_MOE": "MXFP4"}.get(file_type, file_type)
    block, size = gt.tensor_type_sizes(gt.TENSOR_TYPE_IDS[tensor_type]) or (0, 0)
    assert group is not None and block % group == 0
    groups = block // group
    minimum = 16 if file_type.endswith("_1") else 0
    assert block * bits + groups * (SCALE_BITS[scale] + minimum) == 8 * size, (file_type, block, size)
    assert weight in (f"int{bits}", "fp4_e2m1", None)
    assert gt.FILE_TYPE_IDS[file_type]  # a llama.cpp file type
    assert scale == ("e8m0" if file_type == "MXFP4_MOE" else "float8_e4m3" if file_type == "NVFP4" else "float16")


# --------------------------------------------------------------------------------- llama.cpp's own wording
def _llama_cpp_lines(path: Path) -> list[str]:
    """The log lines the vendored llama.cpp prints while it loads ``path`` (vocabulary only: no weights)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, user: Any) -> None:
        lines.append(text.decode("utf-8", "replace"))

    _KEEP.append(on_log)  # the C side keeps the pointer
    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, "".join(lines)[-2000:]
    llama_cpp.llama_model_free(model)
    return [line.strip() for line in "".join(lines).splitlines()]


_KEEP: list[Any] = []


#: the llama hyperparameters a vocabulary-only load reads
_HPARAMS = {"llama.embedding_length": 256, "llama.feed_forward_length": 512, "llama.attention.head_count": 4,
            "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.dimension_count": 64}


def _small_gguf(path: Path, *, file_type: int | None = None, tensor_type: GGMLQuantizationType | None = None) -> Path:
    """A small llama GGUF written by gguf-py (64-token vocabulary) with a file type and/or weights of one type."""
    tensors = [] if tensor_type is None else [
        *((f"blk.{i}.ffn_up.weight", (256, 256), tensor_type) for i in range(3)),
        ("output_norm.weight", (256,), GGMLQuantizationType.F32)]
    [written] = write_gguf(path, tensors, kv=_HPARAMS, vocab=64, file_type=file_type)
    return written


def _file_type_line(lines: list[str]) -> str:
    (line,) = [x for x in lines if x.startswith("print_info: file type")]
    return line.split("=", 1)[1].strip()


@pytest.mark.llamacpp
@pytest.mark.slow
def test_file_type_wording_is_what_llama_cpp_prints(tmp_path):
    """``llama_ftype_name`` of the vendored llama.cpp (llama-cpp-python 0.3.36, llama.cpp @0c1e570) for every file
    type gguf-py knows: a row of FILE_TYPE_DISPLAY that differs, or one llama.cpp names and the table lacks, fails."""
    printed = {}
    for ft in LlamaFileType:
        if ft.name == "GUESSED":
            continue
        lines = _llama_cpp_lines(_small_gguf(tmp_path / f"ft{int(ft)}.gguf", file_type=int(ft)))
        printed[gt.FILE_TYPE_NAMES[int(ft)]] = _file_type_line(lines)
    ours = {name: gt.file_type_display(name) for name in printed}
    assert ours == printed
    assert gt.file_type_display(None) == "unknown, may not work"
    assert gt.file_type_display("F32", guessed=True) == "(guessed) all F32"


#: one type per rule of llama.cpp's guess: the K-quant medium recipes, a type with its own file type, and types
#: without one (all F32)
GUESSED = [GGMLQuantizationType.Q3_K, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q5_K,
           GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q2_K, GGMLQuantizationType.Q5_1,
           GGMLQuantizationType.IQ2_XXS, GGMLQuantizationType.TQ1_0, GGMLQuantizationType.Q8_K,
           GGMLQuantizationType.MXFP4, GGMLQuantizationType.F16, GGMLQuantizationType.BF16]


@pytest.mark.llamacpp
@pytest.mark.slow
@pytest.mark.parametrize("tensor_type", GUESSED, ids=lambda q: q.name)
def test_file_type_guess_is_what_llama_cpp_guesses(tmp_path, tensor_type):
    """Without ``general.file_type`` llama.cpp guesses from the most common weight type and says so."""
    lines = _llama_cpp_lines(_small_gguf(tmp_path / "guess.gguf", tensor_type=tensor_type))
    name, guessed = gt.file_type_name(None, {tensor_type.name: 3, "F32": 1})
    assert guessed is True
    assert gt.file_type_display(name, guessed=True) == _file_type_line(lines)


# ---------------------------------------------------------------------------------------------- safetensors
def _safetensors_blob(dtype: str, n: int, nbytes: int) -> bytes:
    header = json.dumps({"x": {"dtype": dtype, "shape": [n], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + bytes(nbytes)


@pytest.mark.parametrize("dtype", sorted(DTYPE_BITS))
def test_safetensors_dtype_bits_are_what_safetensors_accepts(dtype):
    """safetensors' deserializer takes a tensor of 16 elements only at 16 x bits / 8 bytes, not a byte more or less."""
    from safetensors import SafetensorError, deserialize

    size = 16 * DTYPE_BITS[dtype] // 8
    [(name, view)] = deserialize(_safetensors_blob(dtype, 16, size))
    assert (name, view["dtype"], len(view["data"])) == ("x", dtype, size)
    for wrong in (size - 1, size + 1):
        with pytest.raises(SafetensorError):
            deserialize(_safetensors_blob(dtype, 16, wrong))


def test_safetensors_dtype_table_is_one_table_with_a_word_for_each_row():
    assert dtypes.SAFETENSORS_BITS is DTYPE_BITS
    assert {d: dtypes.container_word(d) for d in DTYPE_BITS} == {
        "BOOL": "bool", "F4": "fp4_e2m1", "F6_E2M3": "fp6_e2m3", "F6_E3M2": "fp6_e3m2", "U8": "uint8", "I8": "int8",
        "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3", "F8_E8M0": "e8m0", "F8_E4M3FNUZ": "float8_e4m3fnuz",
        "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
        "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64",
        "U64": "uint64"}


# ------------------------------------------------------------------------------------------------- KV cache
#: spellings of plain dtypes -> the torch dtype they name
TORCH_SPELLINGS = {"float32": "float32", "fp32": "float32", "f32": "float32", "bfloat16": "bfloat16",
                   "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
                   "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
                   "float8_e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "fp8_inc": "float8_e4m3fn",
                   "fp8_ds_mla": "float8_e4m3fn", "int8": "int8", "i8": "int8",
                   "int8_per_token_head": "int8", "fp8_per_token_head": "float8_e4m3fn"}
#: llama.cpp --cache-type-k/-v block types -> their ggml type
GGML_SPELLINGS = {"q8_0": "Q8_0", "q5_1": "Q5_1", "q5_0": "Q5_0", "q4_1": "Q4_1", "q4_0": "Q4_0", "iq4_nl": "IQ4_NL"}


def test_every_kv_cache_size_from_an_independent_source():
    torch = pytest.importorskip("torch")
    derived: dict[str, float] = {}
    for name, torch_name in TORCH_SPELLINGS.items():
        derived[name] = getattr(torch, torch_name).itemsize
    for name, ggml in GGML_SPELLINGS.items():
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml]]
        derived[name] = size / block
    # 4-bit elements with a scale per group: per-token-head INT4 (scales kept apart), NVFP4 (FP8 scale per 16),
    # MX FP8 (E8M0 scale per 32)
    derived["int4_per_token_head"] = 4 / 8
    for name in ("nvfp4", "fp4", "fp4_e2m1", "nvfp4_4over6", "fp4_mx_block16"):
        derived[name] = (16 * 4 + 8) / 8 / 16
    derived["mxfp8"] = (32 * 8 + 8) / 8 / 32
    # n-bit grouped caches: MLX --kv-bits (a float16 scale and bias per group of 64) = n + 32/64 bits
    for n in range(1, 9):
        derived[f"q{n}"] = (64 * n + 2 * 16) / 8 / 64
    assert derived == KV_DTYPE_BYTES
    assert kv_dtype_bytes(" FP8-E4M3 ") == 1 and kv_dtype_bytes("Q8_0") == 34 / 32
