"""GGUF -> Hugging Face helpers shared by the simulated candidate: which architectures llama.cpp's converter
permutes, and the inverse of its rotary q/k row permutation. Tensor bytes are read and dequantised in
``qcheck.eval.simulate`` (qcheck's bounded header reader for offsets, ``gguf.quants.dequantize`` for values,
gguf-py's ``TensorNameMap`` read backwards for names)."""

from __future__ import annotations

from typing import Any

from qcheck.errors import InputError

#: architectures whose attn_q / attn_k rows convert_hf_to_gguf permutes (``LlamaModel.permute``)
PERMUTED_ARCHS = frozenset({"llama", "mistral"})
#: GGUF tensors that carry no HF parameter (computed buffers), skipped with a note
NON_PARAMETER_TENSORS = ("rope_freqs.weight",)


def unpermute_rows(w: Any, n_head: int, n_head_kv: int | None = None, where: str | None = None) -> Any:
    """Inverse of convert_hf_to_gguf ``LlamaModel.permute`` on a numpy [rows, ...] array."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = w.shape
    if shape[0] % (2 * n_head):
        raise InputError(f"{shape[0]} rows cannot be split into {n_head} rotary heads", where=where)
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
