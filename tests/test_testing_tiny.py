"""The tiny test models (tests/support/tiny_llama.py, gguf_export.py): the tiny Llama is real and deterministic,
and its GGUF export loads in transformers and in real llama.cpp (llama-cpp-python) with the same tokens and
logits."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from support.gguf_export import export_gguf, llama_permute, llama_unpermute  # noqa: E402
from support.tiny_llama import make_tiny_llama  # noqa: E402

TEXT = "The quick brown fox. Le renard brun! Быстрая лиса 敏捷的狐狸 12+30=42"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def f32_gguf(tiny, tmp_path_factory):
    return export_gguf(tiny, tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf", "F32")


def test_same_seed_gives_identical_files_and_another_seed_differs(tiny, tmp_path):
    again = make_tiny_llama(tmp_path / "again")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes(), name
    other = make_tiny_llama(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (tiny / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny / "tokenizer.json").read_bytes()


def test_tokenizer_is_a_real_byte_level_bpe(tiny):
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    cfg = json.loads((tiny / "config.json").read_text())
    ids = tok(TEXT).input_ids
    assert ids[0] == tok.bos_token_id == cfg["bos_token_id"]
    assert tok.eos_token_id == cfg["eos_token_id"] and tok.eos_token_id != tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == TEXT
    assert len(ids) < len(TEXT.encode())  # merges were learned
    assert len(tok) == cfg["vocab_size"] == 512
    assert tok("🦙 unseen ✓").input_ids  # byte-level: nothing is unknown


def test_model_architecture_and_non_degenerate_logits(tiny):
    cfg = json.loads((tiny / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["intermediate_size"], cfg["tie_word_embeddings"]) == (64, 2, 4, 2, 128, False)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny).eval()
    ids = transformers.AutoTokenizer.from_pretrained(tiny)(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits[0]
    probs = torch.softmax(logits, -1)
    assert float(logits.std()) > 0.5
    assert float(probs.max(-1).values.mean()) > 10.0 / logits.shape[-1]  # far from uniform
    assert len(set(logits.argmax(-1).tolist())) > 3  # and not one token everywhere


def test_permutation_round_trip():
    w = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    assert np.array_equal(llama_unpermute(llama_permute(w, 4, 2), 4, 2), w)
    assert not np.array_equal(llama_permute(w, 4, 4), w)


def test_gguf_metadata_follows_convert_hf_to_gguf(f32_gguf, tiny):
    from gguf import GGUFReader

    r = GGUFReader(str(f32_gguf))
    value = lambda k: r.fields[k].contents()  # noqa: E731
    assert value("general.architecture") == "llama"
    assert value("llama.block_count") == 2 and value("llama.embedding_length") == 64
    assert value("llama.attention.head_count") == 4 and value("llama.attention.head_count_kv") == 2
    assert value("llama.rope.dimension_count") == 16 and value("llama.feed_forward_length") == 128
    assert value("general.file_type") == 0
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "gpt-2"
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    tokens = value("tokenizer.ggml.tokens")
    assert len(tokens) == 512 and tokens[tok.bos_token_id] == "<s>"
    assert value("tokenizer.ggml.bos_token_id") == tok.bos_token_id
    assert value("tokenizer.ggml.eos_token_id") == tok.eos_token_id
    assert len(value("tokenizer.ggml.merges")) > 100
    names = {t.name for t in r.tensors}
    assert {"token_embd.weight", "output.weight", "output_norm.weight", "blk.0.attn_q.weight",
            "blk.1.ffn_down.weight", "blk.1.ffn_norm.weight"} <= names and len(names) == 21


def test_transformers_loads_the_f32_gguf_with_identical_weights_and_logits(tiny, f32_gguf):
    pytest.importorskip("accelerate")
    ref = transformers.AutoModelForCausalLM.from_pretrained(tiny).eval()
    gg = transformers.AutoModelForCausalLM.from_pretrained(tiny, gguf_file=str(f32_gguf)).eval()
    for name, tensor in ref.state_dict().items():
        assert torch.equal(tensor, gg.state_dict()[name]), name
    ids = transformers.AutoTokenizer.from_pretrained(tiny)(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, gg(ids).logits)


def test_quantised_exports_keep_norms_f32_and_fall_back_to_f16_when_rows_do_not_fit(tiny, tmp_path):
    from gguf import GGUFReader

    q8 = GGUFReader(str(export_gguf(tiny, tmp_path / "q8.gguf", "Q8_0")))
    types = {t.name: t.tensor_type.name for t in q8.tensors}
    assert types["blk.0.attn_norm.weight"] == "F32" and types["blk.0.attn_q.weight"] == "Q8_0"
    assert types["token_embd.weight"] == "Q8_0" and q8.fields["general.quantization_version"].contents() == 2
    tq = GGUFReader(str(export_gguf(tiny, tmp_path / "tq2.gguf", "TQ2_0")))  # 64-wide rows < 256-element blocks
    assert {t.tensor_type.name for t in tq.tensors} == {"F16", "F32"}
    with pytest.raises(ValueError, match="unsupported GGUF tensor type"):
        export_gguf(tiny, tmp_path / "x.gguf", "Q4_K")


@pytest.mark.llamacpp
def test_llama_cpp_tokenizes_identically_and_reproduces_the_logits(tiny, f32_gguf, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    from qcheck.eval.runners.llamacpp import without_weight_repacking

    ref = transformers.AutoModelForCausalLM.from_pretrained(tiny).eval()
    ids = transformers.AutoTokenizer.from_pretrained(tiny)(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        want = ref(ids).logits[0].numpy()
    errors = {}
    for tensor_type in ("F32", "Q8_0", "Q4_0"):
        path = f32_gguf if tensor_type == "F32" else export_gguf(tiny, tmp_path / f"{tensor_type}.gguf", tensor_type)
        with without_weight_repacking():  # repacked (AMX) kernels die of SIGILL on some VMs
            llm = llama_cpp.Llama(model_path=str(path), logits_all=True, verbose=False, n_ctx=128, n_threads=2,
                                  seed=0)
        assert llm.tokenize(TEXT.encode(), add_bos=True, special=False) == ids[0].tolist()
        llm.eval(ids[0].tolist())
        got = np.array(llm.scores[: ids.shape[1]])
        errors[tensor_type] = float(np.abs(got - want).max())
        del llm
    assert errors["F32"] < 0.02 * float(np.abs(want).max())
    assert errors["F32"] < errors["Q8_0"] < errors["Q4_0"]


def test_tied_model_exports_without_output_weight_and_still_matches(tmp_path):
    pytest.importorskip("accelerate")
    from gguf import GGUFReader

    tied = make_tiny_llama(tmp_path / "tied", tie_embeddings=True)
    path = export_gguf(tied, tmp_path / "tied.gguf", "F32")
    names = {t.name for t in GGUFReader(str(path)).tensors}
    assert "output.weight" not in names and "token_embd.weight" in names
    ref = transformers.AutoModelForCausalLM.from_pretrained(tied).eval()
    gg = transformers.AutoModelForCausalLM.from_pretrained(tied, gguf_file=str(path)).eval()
    ids = transformers.AutoTokenizer.from_pretrained(tied)(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, gg(ids).logits)


def test_bfloat16_reference_exports_and_round_trips_through_gguf_bf16(tmp_path):
    pytest.importorskip("accelerate")
    bf = make_tiny_llama(tmp_path / "bf16", dtype="bfloat16")
    path = export_gguf(bf, tmp_path / "bf16.gguf", "BF16")
    ref = transformers.AutoModelForCausalLM.from_pretrained(bf, dtype=torch.float32).state_dict()
    gg = transformers.AutoModelForCausalLM.from_pretrained(bf, gguf_file=str(path), dtype=torch.float32).state_dict()
    for name, tensor in ref.items():
        assert torch.equal(tensor, gg[name]), name  # bf16 -> BF16 GGUF is lossless
