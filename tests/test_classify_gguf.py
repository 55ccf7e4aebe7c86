"""GGUF classification from Checkpoint records (the reader's output): declared and guessed file
types, the tensor-type histogram, whole-file bits/weight, model numbers, splits and experts."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from qcheck.classify import classify
from qcheck.model import Checkpoint, SourceFile, TensorInfo
from qcheck.readers.gguf_tables import TENSOR_TYPE_IDS, TENSOR_TYPES
from support.contract import validate
from support.strategies import JSON_VALUES


def _tensor(name: str, dtype: str, shape: tuple[int, ...]) -> TensorInfo:
    n = 1
    for d in shape:
        n *= d
    entry = TENSOR_TYPES.get(TENSOR_TYPE_IDS.get(dtype, -1))
    nbytes = n // entry[1] * entry[2] if entry else None
    return TensorInfo(name=name, dtype=dtype, shape=shape, nbytes=nbytes)


def _ckpt(types: dict[str, str], metadata: dict, *, layers: int = 2, hidden: int = 256) -> Checkpoint:
    """A llama-shaped GGUF: ``types`` maps a tensor-name suffix to its ggml type (others F32 norms)."""
    tensors = {"token_embd.weight": _tensor("token_embd.weight", types.get("token_embd", "Q4_K"), (1024, hidden))}
    for n in range(layers):
        tensors[f"blk.{n}.attn_norm.weight"] = _tensor(f"blk.{n}.attn_norm.weight", "F32", (hidden,))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            name = f"blk.{n}.{part}.weight"
            tensors[name] = _tensor(name, types.get(part, "Q4_K"), (hidden, hidden))
    tensors["output.weight"] = _tensor("output.weight", types.get("output", "Q6_K"), (1024, hidden))
    ck = Checkpoint(path="m.gguf", container="gguf", tensors=tensors, metadata=metadata)
    ck.files.append(SourceFile("m.gguf", 123456, "gguf"))
    return ck


MD = {"general.architecture": "llama", "llama.context_length": 8192, "llama.block_count": 2,
      "llama.embedding_length": 256, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2,
      "llama.vocab_size": 1024}


def test_declared_q4_k_m() -> None:
    insp = classify(_ckpt({"attn_v": "Q6_K", "ffn_down": "Q6_K"}, {**MD, "general.file_type": 15}))
    q = insp.quantization
    assert (q.method, q.producer, q.gguf_file_type, q.weight_bits) == ("gguf", "llama.cpp", "Q4_K_M", None)
    assert q.tensor_types == {"Q4_K": 11, "Q6_K": 5, "F32": 2}
    elements = 2 * 1024 * 256 + 14 * 256 * 256 + 2 * 256
    nbytes = (1024 * 256 + 10 * 256 * 256) // 256 * 144 + (4 * 256 * 256 + 1024 * 256) // 256 * 210 + 2 * 256 * 4
    assert q.bits_per_weight == round(nbytes * 8 / elements, 4)
    assert insp.parameters == elements
    assert (insp.architecture, insp.context_length, insp.num_layers, insp.hidden_size, insp.num_attention_heads,
            insp.num_kv_heads, insp.head_dim, insp.vocab_size) == ("llama", 8192, 2, 256, 8, 2, 32, 1024)
    assert insp.size_bytes == 123456
    assert insp.gguf_split_count == 1
    assert insp.dtype == "float32"
    assert not any("guessed" in w for w in insp.warnings)
    assert [r["type"] for r in insp.type_stats] == ["Q4_K", "Q6_K", "F32"]


def test_guessed_file_type_like_llama_cpp() -> None:
    insp = classify(_ckpt({}, dict(MD)))
    assert insp.quantization.gguf_file_type == "Q4_K_M"
    assert "general.file_type is absent; guessed Q4_K_M from the tensor types as llama.cpp does" in insp.warnings
    assert insp.quantization.config_method is None


def test_pure_q8_0_and_unknown_types() -> None:
    q = classify(_ckpt({k: "Q8_0" for k in ("token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                              "ffn_up", "ffn_down", "output")}, {**MD, "general.file_type": 7}))
    assert (q.quantization.gguf_file_type, q.quantization.weight_bits, q.quantization.group_size,
            q.quantization.scale_dtype) == ("Q8_0", 8, 32, "float16")
    odd = _ckpt({"attn_q": "unknown(77)"}, {**MD, "general.file_type": 15})
    insp = classify(odd)
    assert insp.quantization.tensor_types["unknown(77)"] == 2
    assert any("unknown(77)" in w for w in insp.warnings)
    assert insp.quantization.bits_per_weight is not None


def test_moe_split_and_unknown_file_type() -> None:
    md = {**MD, "general.file_type": 999, "llama.expert_count": 8, "llama.expert_used_count": 2, "split.count": 3,
          "tokenizer.ggml.tokens": ["a", "b"]}
    md.pop("llama.vocab_size")
    insp = classify(_ckpt({}, md))
    assert (insp.moe, insp.num_experts, insp.num_experts_used) == (True, 8, 2)
    assert insp.gguf_split_count == 3
    assert insp.vocab_size == 2
    assert insp.quantization.gguf_file_type == "unknown(999)"
    assert any("999" in w for w in insp.warnings)


def test_head_dim_of_one_hidden_unit_per_head() -> None:
    md = {**MD, "general.file_type": 15, "llama.embedding_length": 1, "llama.attention.head_count": 1}
    assert classify(_ckpt({}, md)).head_dim == 1
    assert classify(_ckpt({}, {**md, "llama.embedding_length": 0})).head_dim is None


def test_an_architecture_llama_cpp_never_defined_is_flagged_on_gguf_only() -> None:
    """llama.cpp refuses a GGUF whose general.architecture it never defined; the note is about GGUF names, so a
    safetensors model (architectures are class names there) never gets it."""
    note = "is not an architecture llama.cpp has defined in any build read"
    unknown = classify(_ckpt({}, {**MD, "general.architecture": "totally-new-arch", "general.file_type": 15}))
    assert [w for w in unknown.warnings if note in w] != []
    known = classify(_ckpt({}, {**MD, "general.file_type": 15}))
    assert [w for w in known.warnings if note in w] == []
    st_ckpt = Checkpoint(path="m", container="safetensors", metadata={}, tensors={
        "model.layers.0.mlp.up_proj.weight": TensorInfo("model.layers.0.mlp.up_proj.weight", "BF16", (64, 64), 8192)})
    st_ckpt.configs["config.json"] = {"architectures": ["TotallyNewForCausalLM"], "model_type": "totally_new"}
    st_insp = classify(st_ckpt)
    assert st_insp.architecture == "TotallyNewForCausalLM"
    assert [w for w in st_insp.warnings if note in w] == []


# ---------------------------------------------------------------------- hostile metadata
# Any JSON value under any of these keys, any tensor types: the classifier never crashes and its record fits
# the public JSON contract (qcheck/schemas/inspection.schema.json).
GGUF_KEYS = ["general.architecture", "general.file_type", "general.name", "llama.context_length", "llama.block_count",
             "llama.embedding_length", "llama.attention.head_count", "llama.attention.head_count_kv",
             "llama.expert_count", "llama.expert_used_count", "split.count", "tokenizer.ggml.tokens", "llama.vocab_size"]


@settings(max_examples=150, deadline=None)
@given(edits=st.dictionaries(st.sampled_from(GGUF_KEYS), JSON_VALUES, max_size=6),
       types=st.lists(st.sampled_from(["Q4_K", "Q6_K", "F32", "F16", "unknown(77)", "MXFP4", "Q8_0"]), min_size=0,
                      max_size=5))
def test_gguf_metadata_never_crashes(edits, types) -> None:
    ck = _ckpt(dict(zip(["attn_q", "attn_k", "ffn_up", "output", "token_embd"], types, strict=False)), {**MD, **edits})
    data = json.loads(json.dumps(classify(ck).to_json()))
    validate(data, "inspection")
