"""The inverse of llama.cpp's rotary q/k row permutation (used by the tests' GGUF exporter). The simulated
candidate itself maps GGUF tensors through transformers' own processors: ``qcheck.eval.gguf_convert``."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError


def unpermute_rows(w: Any, n_head: int, n_head_kv: int | None = None, where: str | None = None) -> Any:
    """Inverse of convert_hf_to_gguf ``LlamaModel.permute`` on a numpy [rows, ...] array."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = w.shape
    if shape[0] % (2 * n_head):
        raise InputError(f"{shape[0]} rows cannot be split into {n_head} rotary heads", where=where)
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
