"""Bits per element of every safetensors dtype: one table for the reader (data offsets must match shape x bits)
and the classifier (bytes of a tensor whose reader gave none), light enough for the GGUF-only path to import."""

from __future__ import annotations

#: bits per element of every dtype safetensors 0.8 knows (``Dtype::bitsize`` in tensor.rs)
SAFETENSORS_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
