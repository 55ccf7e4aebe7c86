"""GGUF tensors -> Hugging Face parameters: gguf-py's own dequantisers (``gguf.quants.dequantize``, every ggml
type it knows), gguf-py's ``TensorNameMap`` (the table llama.cpp's converter uses) read backwards for names,
and the inverse of the converter's rotary q/k row permutation for Llama-family models."""

from __future__ import annotations

from collections.abc import Iterable
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


def dequantize_tensor(tensor: Any) -> Any:
    """A gguf-py ``ReaderTensor`` -> float32 numpy array in row-major (HF) order."""
    import numpy as np
    from gguf import quants

    np_shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    try:
        values = quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise InputError(f"gguf-py cannot dequantise tensor type {tensor.tensor_type.name}",
                         where=f"tensor {tensor.name}") from None
    values = np.array(values, dtype=np.float32, copy=True)  # own the data: the reader's memmap is read-only
    if values.size != int(np.prod(np_shape, dtype=np.int64)):
        raise InputError(f"{values.size} dequantised values for shape {np_shape}", where=f"tensor {tensor.name}")
    return values.reshape(np_shape)


def open_reader(path: str) -> Any:
    """gguf-py's reader (memory-maps the file); call only after qcheck's bounded header reader accepted it."""
    from gguf import GGUFReader

    try:
        return GGUFReader(path, "r")
    except (ValueError, IndexError, KeyError, OSError) as exc:
        raise InputError(f"gguf-py cannot read the file: {exc}", path=path) from None


def field_value(reader: Any, key: str) -> Any:
    """A metadata value from gguf-py's reader; None if absent or undecodable (hostile fields are not fatal)."""
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except (ValueError, IndexError):
        return None


def gguf_to_hf(path: str, hf_names: Iterable[str], *, tie_word_embeddings: bool = False
               ) -> tuple[dict[str, Any], list[str]]:
    """Dequantise every tensor of a GGUF file into numpy float32 under the HF names in ``hf_names``.

    Returns (state dict, notes). GGUF tensors that map to no HF name raise ``InputError`` naming them
    (except computed buffers such as ``rope_freqs``); HF names with no GGUF tensor are simply absent (the
    caller reports them), except ``lm_head.weight``, which llama.cpp takes from ``token_embd`` when
    ``output.weight`` is missing, and which is filled the same way here.
    """
    import gguf

    reader = open_reader(path)
    arch = field_value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise InputError("general.architecture is missing or not a string", path=path)
    by_name = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}
    if arch not in by_name:
        raise InputError(f"architecture {arch!r} is unknown to the installed gguf-py", path=path)
    n_blocks = field_value(reader, f"{arch}.block_count")
    if not isinstance(n_blocks, int) or n_blocks < 0 or n_blocks > 100_000:
        raise InputError(f"{arch}.block_count is missing or invalid ({n_blocks!r})", path=path)
    name_map = gguf.get_tensor_name_map(by_name[arch], n_blocks)
    gguf_to_hf_name: dict[str, str] = {}
    for hf in hf_names:
        g = name_map.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is not None:
            gguf_to_hf_name.setdefault(g, hf)
    n_head = field_value(reader, f"{arch}.attention.head_count")
    n_kv = field_value(reader, f"{arch}.attention.head_count_kv") or n_head
    if arch in PERMUTED_ARCHS and not all(isinstance(v, int) and v > 0 for v in (n_head, n_kv)):
        raise InputError(f"{arch}.attention.head_count / head_count_kv must be positive integers to undo the "
                         f"rotary permutation (found {n_head!r}, {n_kv!r})", path=path)
    out: dict[str, Any] = {}
    notes: list[str] = []
    unmapped: list[str] = []
    types: dict[str, int] = {}
    for t in reader.tensors:
        if t.name in NON_PARAMETER_TENSORS:
            notes.append(f"GGUF tensor {t.name} is a computed buffer, not a parameter; skipped")
            continue
        hf = gguf_to_hf_name.get(t.name)
        if hf is None:
            unmapped.append(t.name)
            continue
        data = dequantize_tensor(t)
        if arch in PERMUTED_ARCHS:
            if t.name.endswith("attn_q.weight"):
                data = unpermute_rows(data, n_head, n_head, where=f"tensor {t.name}")
            elif t.name.endswith("attn_k.weight"):
                data = unpermute_rows(data, n_head, n_kv, where=f"tensor {t.name}")
        out[hf] = data
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    if unmapped:
        raise InputError(f"{len(unmapped)} GGUF tensor(s) have no parameter in the reference architecture, e.g. "
                         f"{', '.join(unmapped[:5])}", path=path)
    if "lm_head.weight" in gguf_to_hf_name.values() and "lm_head.weight" not in out and not tie_word_embeddings:
        emb = gguf_to_hf_name.get("token_embd.weight")
        if emb in out:
            out["lm_head.weight"] = out[emb].copy()
            notes.append("the GGUF has no output.weight: lm_head taken from token_embd, as llama.cpp does")
    histogram = ", ".join(f"{k} x{v}" for k, v in sorted(types.items()))
    notes.insert(0, f"GGUF ({arch}): {len(out)} tensors dequantised with gguf-py [{histogram}]"
                 + ("; attn_q/attn_k rows un-permuted" if arch in PERMUTED_ARCHS else ""))
    return out, notes
