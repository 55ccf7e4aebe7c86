"""Header-only GGUF files of real models: the tensor names, ggml types and shapes llama.cpp's quantiser writes,
the model's metadata keys and a full-size vocabulary, with the tensor data left as a sparse hole (a 4.9 GB file
costs its ~10 MB header on disk).

Used by ``bench/bench_startup.py`` (whole-process ``qcheck check`` / ``qcheck inspect`` time) and by tests that
read big real-shaped headers. Two models:

- ``llama31_8b_q4_k_m``: Llama-3.1-8B-Instruct as llama.cpp's ``Q4_K_M`` recipe stores it (292 tensors:
  ``rope_freqs`` for the Llama 3.1 rope scaling, Q4_K matrices, Q6_K for ``attn_v``/``ffn_down`` in the
  ``use_more_bits`` layers and for ``output``, F32 norms), GPT-2 BPE tokenizer with 128,256 tokens and
  280,147 merges (the counts of ``ggml-vocab-llama-bpe.gguf``);
- ``gemma3_12b_q4_k_m``: Gemma-3-12B-it in ``Q4_K_M`` (626 tensors, tied embeddings so ``token_embd`` gets the
  output's Q6_K), a SentencePiece tokenizer of 262,144 tokens with scores and token types, no merges.

llama.cpp's type choice is ``llama_tensor_get_type`` in ``src/llama-quant.cpp``; ``use_more_bits(i, n)`` is
``i < n/8 || i >= 7*n/8 || (i - n/8) % 3 == 2``. The vocabulary is synthetic unless ``vocab_from`` names a real
vocab-only GGUF (llama.cpp's ``models/ggml-vocab-*.gguf``), whose token strings (and merges) are then copied.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Tensor = tuple[str, tuple[int, ...], str]  # name, row-major shape, ggml type name

LLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = "
    "messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set "
    "system_message = \"\" %}\n{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n"
    "{%- for message in messages %}\n    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    "
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n")
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- for message in messages -%}\n    {%- set role = 'model' if message['role'] == "
    "'assistant' else message['role'] -%}\n    {{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
    "+ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}"
    "\n{%- endif -%}\n")


@dataclass
class ModelHeader:
    """One model's GGUF header: architecture, metadata (key -> python value), tensors and tokenizer sizes."""

    label: str
    arch: str
    metadata: dict[str, Any]
    tensors: list[Tensor]
    n_tokens: int
    n_merges: int = 0
    scores: bool = False
    token_ids: dict[str, int] = field(default_factory=dict)


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp quantize: the layers that get Q6_K for attn_v / ffn_down in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def llama31_8b_q4_k_m() -> ModelHeader:
    """Llama-3.1-8B-Instruct, Q4_K_M."""
    layers, d, ff, kv, vocab = 32, 4096, 14336, 8 * 128, 128_256
    tensors: list[Tensor] = [("rope_freqs.weight", (64,), "F32"), ("token_embd.weight", (vocab, d), "Q4_K")]
    for i in range(layers):
        more = "Q6_K" if use_more_bits(i, layers) else "Q4_K"
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (d,), "F32"), (b + "ffn_down.weight", (d, ff), more),
                    (b + "ffn_gate.weight", (ff, d), "Q4_K"), (b + "ffn_up.weight", (ff, d), "Q4_K"),
                    (b + "ffn_norm.weight", (d,), "F32"), (b + "attn_k.weight", (kv, d), "Q4_K"),
                    (b + "attn_output.weight", (d, d), "Q4_K"), (b + "attn_q.weight", (d, d), "Q4_K"),
                    (b + "attn_v.weight", (kv, d), more)]
    tensors += [("output_norm.weight", (d,), "F32"), ("output.weight", (vocab, d), "Q6_K")]
    meta = {"general.type": "model", "general.name": "Meta Llama 3.1 8B Instruct", "general.finetune": "Instruct",
            "general.basename": "Meta-Llama-3.1", "general.size_label": "8B", "general.license": "llama3.1",
            "llama.block_count": layers, "llama.context_length": 131072, "llama.embedding_length": d,
            "llama.feed_forward_length": ff, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
            "llama.rope.freq_base": 500000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "general.file_type": 15, "llama.vocab_size": vocab, "llama.rope.dimension_count": 128,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
            "tokenizer.chat_template": LLAMA_CHAT_TEMPLATE, "general.quantization_version": 2}
    return ModelHeader("Llama-3.1-8B-Instruct-Q4_K_M", "llama", meta, tensors, vocab, n_merges=280_147,
                       token_ids={"bos": 128000, "eos": 128009})


def gemma3_12b_q4_k_m() -> ModelHeader:
    """Gemma-3-12B-it, Q4_K_M (text model; the vision tower ships as a separate mmproj file)."""
    layers, d, ff, heads, kv_heads, hd, vocab = 48, 3840, 15360, 16, 8, 256, 262_144
    tensors: list[Tensor] = [("token_embd.weight", (vocab, d), "Q6_K")]
    for i in range(layers):
        more = "Q6_K" if use_more_bits(i, layers) else "Q4_K"
        b = f"blk.{i}."
        tensors += [(b + "attn_k.weight", (kv_heads * hd, d), "Q4_K"), (b + "attn_k_norm.weight", (hd,), "F32"),
                    (b + "attn_norm.weight", (d,), "F32"), (b + "attn_output.weight", (d, heads * hd), "Q4_K"),
                    (b + "attn_q.weight", (heads * hd, d), "Q4_K"), (b + "attn_q_norm.weight", (hd,), "F32"),
                    (b + "attn_v.weight", (kv_heads * hd, d), more), (b + "ffn_down.weight", (d, ff), more),
                    (b + "ffn_gate.weight", (ff, d), "Q4_K"), (b + "ffn_norm.weight", (d,), "F32"),
                    (b + "ffn_up.weight", (ff, d), "Q4_K"), (b + "post_attention_norm.weight", (d,), "F32"),
                    (b + "post_ffw_norm.weight", (d,), "F32")]
    tensors.append(("output_norm.weight", (d,), "F32"))
    meta = {"general.type": "model", "general.name": "Gemma 3 12b It", "general.finetune": "it",
            "general.basename": "gemma-3", "general.size_label": "12B", "general.license": "gemma",
            "gemma3.context_length": 131072, "gemma3.embedding_length": d, "gemma3.block_count": layers,
            "gemma3.feed_forward_length": ff, "gemma3.attention.head_count": heads,
            "gemma3.attention.head_count_kv": kv_heads, "gemma3.attention.key_length": hd,
            "gemma3.attention.value_length": hd, "gemma3.attention.layer_norm_rms_epsilon": 1e-6,
            "gemma3.rope.freq_base": 1_000_000.0, "gemma3.attention.sliding_window": 1024,
            "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0, "general.file_type": 15,
            "tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
            "tokenizer.chat_template": GEMMA_CHAT_TEMPLATE, "general.quantization_version": 2}
    return ModelHeader("gemma-3-12b-it-Q4_K_M", "gemma3", meta, tensors, vocab, scores=True,
                       token_ids={"bos": 2, "eos": 1, "unknown": 3, "padding": 0})


MODELS = {"llama31-8b-q4_k_m": llama31_8b_q4_k_m, "gemma3-12b-q4_k_m": gemma3_12b_q4_k_m}


def _synthetic_vocab(n_tokens: int, n_merges: int, seed: int) -> tuple[list[str], list[str]]:
    """Tokens of 1-16 characters (byte-level BPE spellings included) and merges of two tokens each."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\u0120\u010a.,;:!?-_()[]\u00e9\u4e2d"
    tokens = [f"{''.join(rng.choices(alphabet, k=rng.randint(1, 12)))}{i:x}" for i in range(n_tokens)]
    merges = [f"{rng.choice(tokens)} {rng.choice(tokens)}" for _ in range(n_merges)]
    return tokens, merges


def _real_vocab(path: Path, n_tokens: int, n_merges: int) -> tuple[list[str], list[str]]:
    """Token strings and merges of a vocab-only GGUF, cut or padded to the model's counts."""
    from qcheck.readers.gguf import read_gguf_file

    md = read_gguf_file(path, materialize=("tokenizer.ggml.tokens", "tokenizer.ggml.merges")).metadata
    tokens = list(md["tokenizer.ggml.tokens"])[:n_tokens]
    tokens += [f"<unused{i}>" for i in range(n_tokens - len(tokens))]
    merges = list(md.get("tokenizer.ggml.merges", []))[:n_merges]
    return tokens, merges


def write_header(path: Path, model: ModelHeader, vocab_from: Path | None = None, seed: int = 0) -> tuple[int, int]:
    """Write ``model`` to ``path`` with gguf-py's GGUFWriter, then extend the file sparsely to the size its tensor
    data needs. Returns (header bytes, apparent file size)."""
    import gguf
    import numpy as np

    tokens, merges = (_real_vocab(vocab_from, model.n_tokens, model.n_merges) if vocab_from is not None
                      else _synthetic_vocab(model.n_tokens, model.n_merges, seed))
    writer = gguf.GGUFWriter(path, model.arch)
    for key, value in model.metadata.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, value)
    writer.add_token_list(tokens)
    if model.scores:
        writer.add_token_scores([-float(i) for i in range(model.n_tokens)])
    writer.add_token_types([3 if i < 8 else 1 for i in range(model.n_tokens)])
    if merges:
        writer.add_token_merges(merges)
    for what, token_id in model.token_ids.items():
        writer.add_uint32(f"tokenizer.ggml.{what}_token_id", token_id)
    total = 0
    for name, shape, type_name in model.tensors:
        qtype = gguf.GGMLQuantizationType[type_name]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(shape)) // block * size
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        total += gguf.GGUFWriter.ggml_pad(nbytes, writer.data_alignment)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.stat().st_size
    os.truncate(path, gguf.GGUFWriter.ggml_pad(header, writer.data_alignment) + total)
    return header, path.stat().st_size
