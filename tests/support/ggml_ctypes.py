"""llama.cpp's own quantisers, called through ctypes from the libggml that llama-cpp-python ships, as an independent
check of qcheck's torch emulation: ``quantize_row_<type>`` of libggml-cpu (what the CPU backend runs: the x86 SIMD
Q8_0/Q8_1 for activations, the reference functions for the KV cache types) and ``dequantize_row_<type>`` of
libggml-base."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

#: bytes per block and values per block (ggml/src/ggml-common.h)
BLOCKS = {"q4_0": (18, 32), "q4_1": (20, 32), "q5_0": (22, 32), "q5_1": (24, 32), "q8_0": (34, 32),
          "iq4_nl": (18, 32), "q8_K": (292, 256)}


def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    import llama_cpp

    root = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(root / "libggml-base.so"))
    cpu = ctypes.CDLL(str(root / "libggml-cpu.so"))
    return base, cpu


def ggml_roundtrip(values: np.ndarray, kind: str) -> np.ndarray:
    """Each row of ``values`` (float32, a whole number of blocks) quantised by libggml-cpu's ``quantize_row_KIND`` and
    dequantised by libggml-base's ``dequantize_row_KIND`` (Q8_1 has no dequantiser: its values are Q8_0's)."""
    base, cpu = _libs()
    store = "q8_0" if kind == "q8_1" else kind
    nbytes, per = BLOCKS[store]
    x = np.ascontiguousarray(values, dtype=np.float32)
    out = np.empty_like(x)
    quantise = getattr(cpu, f"quantize_row_{store}")
    dequantise = getattr(base, f"dequantize_row_{store}")
    for row in range(x.shape[0]):
        n = x.shape[1]
        buf = (ctypes.c_uint8 * (n // per * nbytes))()
        quantise(x[row].ctypes.data_as(ctypes.c_void_p), buf, ctypes.c_int64(n))
        dequantise(buf, out[row].ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
    return out
