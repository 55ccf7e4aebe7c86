"""Canonical dtype words (docs/design.md): one spelling for every way files and configs name a dtype.

safetensors writes ``F8_E4M3``, torch writes ``float8_e4m3fn``, configs write ``e4m3``, ``fp8_e4m3``,
``torch.bfloat16`` or ``bf16``; the public JSON uses one lower-case word for each.
"""

from __future__ import annotations

from qcheck.model import TensorInfo
from qcheck.readers.dtype_bits import SAFETENSORS_BITS

#: container dtype (safetensors string or GGUF float type) -> canonical word
_CONTAINER: dict[str, str] = {
    "F8_E4M3": "float8_e4m3", "F8_E4M3FN": "float8_e4m3", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "e8m0",
    "F4": "fp4_e2m1", "F6_E2M3": "fp6_e2m3", "F6_E3M2": "fp6_e3m2",
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64",
    "I8": "int8", "U8": "uint8", "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32",
    "I64": "int64", "U64": "uint64", "BOOL": "bool", "C64": "complex64",
}

#: free-form config spellings -> canonical word
_WORDS: dict[str, str] = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "f16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "f32": "float32", "float32": "float32", "float": "float32",
    "fp64": "float64", "float64": "float64", "double": "float64",
    # quanto's "float8" is its qfloat8, float8_e4m3fn
    "fp8": "float8_e4m3", "float8": "float8_e4m3", "e4m3": "float8_e4m3", "fp8_e4m3": "float8_e4m3", "float8_e4m3fn": "float8_e4m3",
    "float8_e4m3": "float8_e4m3", "f8_e4m3": "float8_e4m3", "e4m3fn": "float8_e4m3",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2", "f8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "fp8_e4m3fnuz": "float8_e4m3fnuz",
    "e8m0": "e8m0", "float8_e8m0fnu": "e8m0", "f8_e8m0": "e8m0", "ue8m0": "e8m0",
    "fp4": "fp4_e2m1", "e2m1": "fp4_e2m1", "fp4_e2m1": "fp4_e2m1", "float4_e2m1fn_x2": "fp4_e2m1",
    "fp6_e2m3": "fp6_e2m3", "fp6_e3m2": "fp6_e3m2",
    "int8": "int8", "uint8": "uint8", "int4": "int4", "uint4": "uint4", "int2": "int2", "int3": "int3",
    "int5": "int5", "int6": "int6", "uint2": "uint2", "uint3": "uint3",
    "nf4": "nf4",
}

FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ")
#: GGUF tensor types that are plain floats (everything else in a GGUF file is a llama.cpp quant type)
GGUF_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def container_word(dtype: str | None) -> str | None:
    """Canonical word for a container dtype string (``F8_E4M3`` -> ``float8_e4m3``); unknown -> None."""
    if dtype is None:
        return None
    return _CONTAINER.get(dtype.upper())


def config_word(value: object) -> str | None:
    """Canonical word for a dtype as a config spells it (``torch.bfloat16``, ``e4m3``, ``fp8_e4m3``)."""
    if not isinstance(value, str) or not value.strip():
        return None
    word = value.strip().lower()
    if word.startswith("torch."):
        word = word[len("torch."):]
    if word in _WORDS:
        return _WORDS[word]
    if word.upper() in _CONTAINER:
        return _CONTAINER[word.upper()]
    return None  # not a dtype qcheck can name: better unknown than a made-up word in the JSON


def int_word(bits: float | int | None, signed: bool = True) -> str | None:
    """``int4``/``uint4``-style word for integer weights of ``bits`` bits."""
    if bits is None or bits != int(bits) or not 1 <= bits <= 8:
        return None
    return f"{'' if signed else 'u'}int{int(bits)}"


def tensor_nbytes(t: TensorInfo) -> int | None:
    """Bytes of a tensor's data: the reader's figure, else elements x dtype bits (F4 shapes are logical)."""
    if t.nbytes is not None:
        return t.nbytes
    bits = SAFETENSORS_BITS.get(t.dtype.upper())
    if bits is None:
        return None
    return t.numel * bits // 8
