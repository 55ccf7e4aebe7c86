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

For the speed and deployment-option tests (issue 33) the same Llama-3.1-8B in ``Q3_K_M`` and ``Q4_0`` (llama.cpp's
recipes: Q3_K_M keeps ``attn_v`` Q5_K in the first two layers and Q4_K after, ``ffn_down`` Q5_K in the first
n/16 layers and Q4_K after, ``attn_output`` Q4_K; Q4_0 is Q4_0 throughout but the Q6_K ``output``), gpt-oss-20b as
ggml-org's MXFP4 GGUF (MXFP4 experts, every other layer a 128-token window, attention sinks) and
DeepSeek-V2-Lite in ``Q4_K_M`` (MLA: a 512 + 64 latent cached per token per layer; 64 routed experts, 6 used, 2
shared, the first layer dense).
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gguf

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


#: llama.cpp file types (llama_ftype) of the recipes written here
FILE_TYPES = {"Q4_0": 2, "Q3_K_M": 12, "Q4_K_M": 15}


def _llama_types(ftype: str, i: int, layers: int) -> tuple[str, str, str, str]:
    """(default, attn_v, ffn_down, attn_output) types of layer ``i`` in llama.cpp's ``ftype`` recipe."""
    if ftype == "Q4_K_M":
        more = "Q6_K" if use_more_bits(i, layers) else "Q4_K"
        return "Q4_K", more, more, "Q4_K"
    if ftype == "Q3_K_M":
        return "Q3_K", "Q5_K" if i < 2 else "Q4_K", "Q5_K" if i < layers // 16 else "Q4_K", "Q4_K"
    if ftype == "Q4_0":
        return "Q4_0", "Q4_0", "Q4_0", "Q4_0"
    raise ValueError(f"no recipe for {ftype}")


def llama31_8b(ftype: str = "Q4_K_M") -> ModelHeader:
    """Llama-3.1-8B-Instruct in one of llama.cpp's recipes (``FILE_TYPES``)."""
    layers, d, ff, kv, vocab = 32, 4096, 14336, 8 * 128, 128_256
    tensors: list[Tensor] = [("rope_freqs.weight", (64,), "F32"),
                             ("token_embd.weight", (vocab, d), _llama_types(ftype, 0, layers)[0])]
    for i in range(layers):
        base, v_type, down, out = _llama_types(ftype, i, layers)
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (d,), "F32"), (b + "ffn_down.weight", (d, ff), down),
                    (b + "ffn_gate.weight", (ff, d), base), (b + "ffn_up.weight", (ff, d), base),
                    (b + "ffn_norm.weight", (d,), "F32"), (b + "attn_k.weight", (kv, d), base),
                    (b + "attn_output.weight", (d, d), out), (b + "attn_q.weight", (d, d), base),
                    (b + "attn_v.weight", (kv, d), v_type)]
    tensors += [("output_norm.weight", (d,), "F32"), ("output.weight", (vocab, d), "Q6_K")]
    meta = {"general.type": "model", "general.name": "Meta Llama 3.1 8B Instruct", "general.finetune": "Instruct",
            "general.basename": "Meta-Llama-3.1", "general.size_label": "8B", "general.license": "llama3.1",
            "llama.block_count": layers, "llama.context_length": 131072, "llama.embedding_length": d,
            "llama.feed_forward_length": ff, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
            "llama.rope.freq_base": 500000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "general.file_type": FILE_TYPES[ftype], "llama.vocab_size": vocab, "llama.rope.dimension_count": 128,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
            "tokenizer.chat_template": LLAMA_CHAT_TEMPLATE, "general.quantization_version": 2}
    return ModelHeader(f"Llama-3.1-8B-Instruct-{ftype}", "llama", meta, tensors, vocab, n_merges=280_147,
                       token_ids={"bos": 128000, "eos": 128009})


def llama31_8b_q4_k_m() -> ModelHeader:
    """Llama-3.1-8B-Instruct, Q4_K_M."""
    return llama31_8b("Q4_K_M")


def gpt_oss_20b_mxfp4() -> ModelHeader:
    """gpt-oss-20b as ggml-org/gpt-oss-20b-GGUF stores it: MXFP4 routed experts (32, 4 used, 2880 wide) with F32
    biases, Q8_0 embeddings, output and attention (with F32 biases and sinks): 12.05 GB, the published file's 12.1;
    every other layer a 128-token window."""
    layers, d, heads, kv_heads, hd, experts, ff, vocab = 24, 2880, 64, 8, 64, 32, 2880, 201_088
    tensors: list[Tensor] = [("token_embd.weight", (vocab, d), "Q8_0")]
    for i in range(layers):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (d,), "F32"), (b + "post_attention_norm.weight", (d,), "F32"),
                    (b + "attn_q.weight", (heads * hd, d), "Q8_0"), (b + "attn_q.bias", (heads * hd,), "F32"),
                    (b + "attn_k.weight", (kv_heads * hd, d), "Q8_0"), (b + "attn_k.bias", (kv_heads * hd,), "F32"),
                    (b + "attn_v.weight", (kv_heads * hd, d), "Q8_0"), (b + "attn_v.bias", (kv_heads * hd,), "F32"),
                    (b + "attn_output.weight", (d, heads * hd), "Q8_0"), (b + "attn_output.bias", (d,), "F32"),
                    (b + "attn_sinks.weight", (heads,), "F32"), (b + "ffn_gate_inp.weight", (experts, d), "F32"),
                    (b + "ffn_gate_inp.bias", (experts,), "F32"),
                    (b + "ffn_gate_exps.weight", (experts, ff, d), "MXFP4"),
                    (b + "ffn_gate_exps.bias", (experts, ff), "F32"),
                    (b + "ffn_up_exps.weight", (experts, ff, d), "MXFP4"),
                    (b + "ffn_up_exps.bias", (experts, ff), "F32"),
                    (b + "ffn_down_exps.weight", (experts, d, ff), "MXFP4"),
                    (b + "ffn_down_exps.bias", (experts, d), "F32")]
    tensors += [("output_norm.weight", (d,), "F32"), ("output.weight", (vocab, d), "Q8_0")]
    meta = {"general.type": "model", "general.name": "Gpt Oss 20b", "general.basename": "gpt-oss",
            "general.size_label": "20B", "general.license": "apache-2.0",
            "gpt-oss.block_count": layers, "gpt-oss.context_length": 131072, "gpt-oss.embedding_length": d,
            "gpt-oss.feed_forward_length": ff, "gpt-oss.attention.head_count": heads,
            "gpt-oss.attention.head_count_kv": kv_heads, "gpt-oss.attention.key_length": hd,
            "gpt-oss.attention.value_length": hd, "gpt-oss.rope.freq_base": 150000.0,
            "gpt-oss.attention.layer_norm_rms_epsilon": 1e-5, "gpt-oss.expert_count": experts,
            "gpt-oss.expert_used_count": 4, "gpt-oss.expert_feed_forward_length": ff,
            "gpt-oss.attention.sliding_window": 128, "gpt-oss.rope.scaling.type": "yarn",
            "gpt-oss.rope.scaling.factor": 32.0, "gpt-oss.rope.scaling.original_context_length": 4096,
            "general.file_type": 38, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o",
            "general.quantization_version": 2}
    return ModelHeader("gpt-oss-20b-mxfp4", "gpt-oss", meta, tensors, vocab, n_merges=446_189,
                       token_ids={"bos": 199998, "eos": 200002})


def _k_fallback(ggml_type: str, row: int) -> str:
    """llama.cpp quantize: a k-quant whose row is not a multiple of 256 falls back (Q4_K -> Q5_0, Q6_K -> Q8_0)."""
    if row % 256 == 0:
        return ggml_type
    return {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(ggml_type, ggml_type)


def deepseek_v2_lite_q4_k_m() -> ModelHeader:
    """DeepSeek-V2-Lite-Chat in Q4_K_M: MLA (the query not compressed: q_lora_rank 0), 64 routed experts of 1408, 6
    used, 2 shared, the first layer a dense 10944-wide feed-forward (rows of 10944 and 1408 are not multiples of 256:
    their k-quants fall back as llama.cpp's quantiser does)."""
    layers, d, heads, lora, rope, nope, v_dim, vocab = 27, 2048, 16, 512, 64, 128, 128, 102_400
    experts, used, ff_exp, shared, ff = 64, 6, 1408, 2, 10944
    tensors: list[Tensor] = [("token_embd.weight", (vocab, d), "Q4_K")]
    for i in range(layers):
        more = "Q6_K" if use_more_bits(i, layers) else "Q4_K"
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", (d,), "F32"), (b + "ffn_norm.weight", (d,), "F32"),
                    (b + "attn_q.weight", (heads * (nope + rope), d), "Q4_K"),
                    (b + "attn_kv_a_mqa.weight", (lora + rope, d), "Q4_K"),
                    (b + "attn_kv_a_norm.weight", (lora,), "F32"),
                    (b + "attn_kv_b.weight", (heads * (nope + v_dim), lora), more),
                    (b + "attn_output.weight", (d, heads * v_dim), "Q4_K")]
        if i == 0:
            tensors += [(b + "ffn_gate.weight", (ff, d), "Q4_K"), (b + "ffn_up.weight", (ff, d), "Q4_K"),
                        (b + "ffn_down.weight", (d, ff), _k_fallback(more, ff))]
            continue
        tensors += [(b + "ffn_gate_inp.weight", (experts, d), "F32"),
                    (b + "ffn_gate_exps.weight", (experts, ff_exp, d), "Q4_K"),
                    (b + "ffn_up_exps.weight", (experts, ff_exp, d), "Q4_K"),
                    (b + "ffn_down_exps.weight", (experts, d, ff_exp), _k_fallback(more, ff_exp)),
                    (b + "ffn_gate_shexp.weight", (shared * ff_exp, d), "Q4_K"),
                    (b + "ffn_up_shexp.weight", (shared * ff_exp, d), "Q4_K"),
                    (b + "ffn_down_shexp.weight", (d, shared * ff_exp), more)]
    tensors += [("output_norm.weight", (d,), "F32"), ("output.weight", (vocab, d), "Q6_K")]
    meta = {"general.type": "model", "general.name": "DeepSeek-V2-Lite-Chat", "general.size_label": "64x1.5B",
            "deepseek2.block_count": layers, "deepseek2.context_length": 163840, "deepseek2.embedding_length": d,
            "deepseek2.feed_forward_length": ff, "deepseek2.attention.head_count": heads,
            "deepseek2.attention.head_count_kv": heads, "deepseek2.attention.key_length": nope + rope,
            "deepseek2.attention.value_length": v_dim, "deepseek2.attention.kv_lora_rank": lora,
            "deepseek2.rope.dimension_count": rope, "deepseek2.rope.freq_base": 10000.0,
            "deepseek2.attention.layer_norm_rms_epsilon": 1e-6, "deepseek2.leading_dense_block_count": 1,
            "deepseek2.expert_count": experts, "deepseek2.expert_used_count": used,
            "deepseek2.expert_shared_count": shared, "deepseek2.expert_feed_forward_length": ff_exp,
            "deepseek2.expert_weights_scale": 1.0, "general.file_type": 15, "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": "deepseek-llm", "general.quantization_version": 2}
    return ModelHeader("DeepSeek-V2-Lite-Chat-Q4_K_M", "deepseek2", meta, tensors, vocab, n_merges=99_757,
                       token_ids={"bos": 100000, "eos": 100001})


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


def light(model: ModelHeader) -> ModelHeader:
    """The same header with a 4096-entry token list and no merges (the embedding and output keep the model's vocab
    shape): memory, speed and start-up read the tensors and hyperparameters, and writing it takes a second, not ten."""
    return dataclasses.replace(model, n_tokens=4096, n_merges=0, token_ids={})


MODELS = {"llama31-8b-q4_k_m": llama31_8b_q4_k_m, "gemma3-12b-q4_k_m": gemma3_12b_q4_k_m,
          "llama31-8b-q3_k_m": lambda: llama31_8b("Q3_K_M"), "llama31-8b-q4_0": lambda: llama31_8b("Q4_0"),
          "gpt-oss-20b-mxfp4": gpt_oss_20b_mxfp4, "deepseek-v2-lite-q4_k_m": deepseek_v2_lite_q4_k_m}


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
    return write_sparse_tensors(writer, model.tensors, path)


def write_sparse_tensors(writer: gguf.GGUFWriter, tensors: Iterable[tuple[str, tuple[int, ...], str]],
                         path: Path) -> tuple[int, int]:
    """Add the tensors' infos (name, shape, ggml type name), write the header, and extend the file to its full
    size as a sparse hole (no tensor data on disk). Returns (header bytes, apparent file size)."""
    import gguf
    import numpy as np

    total = 0
    for name, shape, type_name in tensors:
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
