"""Export a Hugging Face Llama directory to GGUF the way llama.cpp's ``convert_hf_to_gguf.py`` does.

Tests need GGUF files that real consumers accept: transformers (``from_pretrained(dir, gguf_file=...)``) and
llama.cpp (through llama-cpp-python). This follows ``LlamaModel`` in convert_hf_to_gguf.py: llama.*
hyperparameter keys, gguf-py's ``TensorNameMap`` for tensor names, the rotary q/k row permutation, a
byte-level BPE vocabulary (``tokenizer.ggml.model = "gpt2"``) with merges and special ids from gguf-py's
``SpecialVocab``, 1-D tensors kept in F32, and ``gguf.quants.quantize`` for quantised types (a tensor
whose rows do not fit the type's block falls back to F16, as convert_hf_to_gguf does on ``QuantError``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: tensor types ``export_gguf`` can write (gguf-py 0.19 implements quantisation for these)
EXPORT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4")

_FILE_TYPES = {
    "F32": "ALL_F32",
    "F16": "MOSTLY_F16",
    "BF16": "MOSTLY_BF16",
    "Q8_0": "MOSTLY_Q8_0",
    "Q4_0": "MOSTLY_Q4_0",
    "Q4_1": "MOSTLY_Q4_1",
    "Q5_0": "MOSTLY_Q5_0",
    "Q5_1": "MOSTLY_Q5_1",
    "TQ1_0": "MOSTLY_TQ1_0",
    "TQ2_0": "MOSTLY_TQ2_0",
    "MXFP4": "MOSTLY_MXFP4_MOE",
}


def llama_permute(weights: Any, n_head: int, n_head_kv: int | None = None) -> Any:
    """convert_hf_to_gguf ``LlamaModel.permute``: reorder q/k rows from HF's rotate-half layout to GGML's
    interleaved rotary layout (pairs of adjacent dimensions)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = weights.shape
    return weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def llama_unpermute(weights: Any, n_head: int, n_head_kv: int | None = None) -> Any:
    """Inverse of ``llama_permute`` (what transformers' GGUF loader applies to attn_q / attn_k): the
    simulated candidate's own un-permutation, so the tests exercise the code that reads real GGUFs."""
    from qcheck.eval.dequant.gguf import unpermute_rows

    return unpermute_rows(weights, n_head, n_head_kv)


def export_gguf(hf_dir: str | Path, out_path: str | Path, tensor_type: str = "F32", *,
                pre: str | None = "gpt-2") -> Path:
    """Write ``out_path`` (a llama-architecture GGUF) from the safetensors Llama in ``hf_dir``.

    ``tensor_type`` is applied to every 2-D tensor (embeddings and output included, as convert_hf_to_gguf
    ``--outtype`` does); norms stay F32. ``pre`` is ``tokenizer.ggml.pre``; None leaves it out, as GGUFs
    converted before llama.cpp had the key do (llama.cpp then splits text with its ``default`` pre-tokenizer,
    which cuts punctuation runs apart: ``" ="`` becomes ``" "``, ``"="``). Returns ``out_path``.
    """
    import gguf

    tensor_type = tensor_type.upper()
    if tensor_type not in EXPORT_TYPES:
        raise ValueError(f"unsupported GGUF tensor type {tensor_type!r}; supported: {', '.join(EXPORT_TYPES)}")
    hf_dir = Path(hf_dir)
    out_path = Path(out_path)
    hp = json.loads((hf_dir / "config.json").read_text())
    arch = hp.get("model_type", "llama")
    if arch not in ("llama", "mistral"):
        raise ValueError(f"export_gguf handles Llama-architecture models, not {arch!r}")
    n_head = hp["num_attention_heads"]
    n_kv = hp.get("num_key_value_heads", n_head)
    n_layers = hp["num_hidden_layers"]
    head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head
    qtype = gguf.GGMLQuantizationType[tensor_type]

    writer = gguf.GGUFWriter(str(out_path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(hf_dir.name)
    writer.add_context_length(hp.get("max_position_embeddings", 2048))
    writer.add_embedding_length(hp["hidden_size"])
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(hp["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    rope = hp.get("rope_parameters") or {}
    writer.add_rope_freq_base(float(rope.get("rope_theta", hp.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(hp.get("rms_norm_eps", 1e-5)))
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_vocab_size(hp["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType[_FILE_TYPES[tensor_type]])
    if tensor_type not in ("F32", "F16", "BF16"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_vocab(writer, hf_dir, hp["vocab_size"], pre)

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
    shards = sorted(hf_dir.glob("*.safetensors"))
    if not shards:
        raise ValueError(f"no safetensors weights in {hf_dir}")
    for shard in shards:
        _add_tensors(writer, shard, name_map, qtype, n_head, n_kv)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path


def _add_tensors(writer, shard: Path, name_map, qtype, n_head: int, n_kv: int) -> None:
    import gguf
    import numpy as np
    from gguf import quants
    from safetensors import safe_open

    # framework="pt": numpy has no bfloat16, and references are often saved in it
    with safe_open(str(shard), framework="pt") as f:
        for hf_name in f.keys():  # noqa: SIM118 - safe_open handles are not iterable
            data = f.get_tensor(hf_name).float().numpy()
            if hf_name.endswith("self_attn.q_proj.weight"):
                data = llama_permute(data, n_head, n_head)
            elif hf_name.endswith("self_attn.k_proj.weight"):
                data = llama_permute(data, n_head, n_kv)
            new_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                raise ValueError(f"cannot map tensor {hf_name!r} to a GGUF name")
            array, raw = _encode(np, quants, gguf, data, qtype)
            writer.add_tensor(new_name, array, raw_dtype=raw)
    # a tied model stores no lm_head.weight, so no output.weight is written: llama.cpp then reuses
    # token_embd, exactly as for converted tied models


def _encode(np, quants, gguf, data, qtype):
    """(array, raw_dtype) for GGUFWriter.add_tensor: 1-D stays F32; quantised rows that do not fit the block
    size fall back to F16 (convert_hf_to_gguf catches ``gguf.QuantError`` the same way)."""
    if data.ndim <= 1 or qtype == gguf.GGMLQuantizationType.F32:
        return np.ascontiguousarray(data, dtype=np.float32), gguf.GGMLQuantizationType.F32
    if qtype == gguf.GGMLQuantizationType.F16:
        return np.ascontiguousarray(data, dtype=np.float16), gguf.GGMLQuantizationType.F16
    try:
        return quants.quantize(data, qtype), qtype
    except quants.QuantError:
        return np.ascontiguousarray(data, dtype=np.float16), gguf.GGMLQuantizationType.F16


def _add_vocab(writer, hf_dir: Path, vocab_size: int, pre: str | None) -> None:
    """convert_hf_to_gguf ``get_vocab_base`` + ``SpecialVocab``: tokens by id, added special tokens as
    CONTROL, missing ids padded as ``[PAD{i}]`` UNUSED, merges and bos/eos/pad ids from tokenizer files."""
    import gguf
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_dir), trust_remote_code=False)
    reverse = {i: t for t, i in tok.get_vocab().items()}
    added = set(tok.get_added_vocab())
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif reverse[i] in added:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    # our tokenizer uses GPT-2's pre-tokenizer regex (tokenizers ByteLevel use_regex=True) -> llama.cpp "gpt-2"
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(hf_dir, load_merges=True, n_vocab=len(tokens))
    special.add_to_gguf(writer)
