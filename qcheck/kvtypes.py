"""KV-cache element types: every spelling engines accept for their cache-type flags, and its size.

One table for everything that names a KV-cache type: the request object validates ``--kv-cache-dtype`` /
``--cache-type-k/-v`` against it, memory multiplies by it, the matrix's KV dimension judges the normalised
name. Imported on the header-only path: nothing heavy here.
"""

from __future__ import annotations

from qcheck.errors import UsageError

#: bytes per cached element, by every spelling engines accept for --kv-cache-dtype / -ctk / -ctv
KV_DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "f32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "f16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3": 1, "float8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
    "int8": 1, "i8": 1, "int8_per_token_head": 1, "fp8_per_token_head": 1, "int4_per_token_head": 0.5,
    # llama.cpp --cache-type-k/-v block types (block bytes / 32 elements, ggml-common.h)
    "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
    # FP4 KV (TensorRT-LLM NVFP4 KV cache): 4-bit elements + one FP8 scale per 16
    "nvfp4": 0.5 + 1 / 16, "fp4": 0.5 + 1 / 16, "fp4_e2m1": 0.5 + 1 / 16, "nvfp4_4over6": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16, "mxfp8": 1 + 1 / 32,
    # n-bit grouped caches: MLX --kv-bits (affine, FP16 scale + bias per 64), ExLlamaV2/V3 Q4/Q6/Q8
    # (exllamav2 tensor_p.py: (n + 0.5) / 8 bytes), transformers quanto/HQQ; qcheck spells them q1 ... q8
    **{f"q{n}": (n + 0.5) / 8 for n in range(1, 9)},
}


def normalise_kv(name: str) -> str:
    """The table's key for a spelling: lower case, ``-`` as ``_`` (``FP8-E4M3`` -> ``fp8_e4m3``)."""
    return name.strip().lower().replace("-", "_")


def kv_dtype_bytes(name: str) -> float:
    """Bytes per cached element for a KV-cache type; an unknown name is a UsageError listing them."""
    key = normalise_kv(name)
    if key not in KV_DTYPE_BYTES:
        raise UsageError(f"unknown KV cache dtype {name!r}; known: {', '.join(sorted(KV_DTYPE_BYTES))}")
    return KV_DTYPE_BYTES[key]


def is_known_kv(name: str) -> bool:
    return normalise_kv(name) in KV_DTYPE_BYTES
