"""Simulated GGUF candidates on real llama.cpp exports, one architecture after another.

Each tiny model is a real transformers architecture (llama, mistral, gemma, gemma2, gemma3, qwen2, qwen3, phi3,
and the MoE qwen2moe and mixtral; tokenizers with and without BOS), exported by llama.cpp's own
``convert_hf_to_gguf.py``. The F32 export holds the reference's own weights, so its simulated candidate must give a
KL divergence of ~0 against the reference: any conversion qcheck undid wrongly (Gemma's 1 + w norms, the rotary
permutation, stacked experts, fused projections) shows as a large KLD. The tensors must also equal what
transformers' own GGUF loader produces. Q8_0 exports are measured through the CLI beside llama.cpp's kernels.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support.llamacpp_convert import ARCHITECTURES, NO_BOS, REPO, build_tiny_model, convert, llama_cpp_source

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

#: architectures measured through the CLI beside llama.cpp's own Q8_0 kernels (dense with BOS, BOS-less MoE)
CLI_ARCHS = ("llama", "qwen2_moe")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """model_type -> (model folder, F32 GGUF); Q8_0 exports for CLI_ARCHS too."""
    source = llama_cpp_source()
    root = tmp_path_factory.mktemp("convert")
    dirs = {arch: build_tiny_model(arch, root / arch) for arch in ARCHITECTURES}
    jobs = [(d, "f32") for d in dirs.values()] + [(dirs[a], "q8_0") for a in CLI_ARCHS]
    convert(source, jobs)
    return dirs


def _kld_against_reference(model_dir, state) -> float:
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    candidate = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    result = candidate.load_state_dict(state, strict=False)
    assert not result.unexpected_keys
    assert set(result.missing_keys) <= {"lm_head.weight"}
    ids = torch.randint(3, 512, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = reference(ids).logits.float().log_softmax(-1)
        cand = candidate(ids).logits.float().log_softmax(-1)
    return float((ref.exp() * (ref - cand)).sum(-1).mean())


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_f32_export_is_the_reference(exports, arch):
    from qcheck.eval.simulate import simulated_state_dict

    model_dir = exports[arch]
    state, notes = simulated_state_dict(str(model_dir / "model-f32.gguf"), str(model_dir))
    assert notes[0].startswith("GGUF (")
    kld = _kld_against_reference(model_dir, state)
    assert kld < 1e-6, f"{arch}: F32 round trip KLD {kld:.3e}"


#: architectures transformers' own load_gguf_checkpoint handles (it lacks gemma 1, whose proof is the round trip;
#: it names mistral/mixtral GGUF tensors by the HF model type and fails on them, so qcheck passes the GGUF's own)
TRANSFORMERS_LOADS = ("gemma2", "gemma3_text", "llama", "phi3", "qwen2", "qwen2_moe", "qwen3")


@pytest.mark.parametrize("arch", TRANSFORMERS_LOADS)
def test_tensors_equal_transformers_gguf_loader(exports, arch):
    """qcheck's reading + transformers' processors == transformers' load_gguf_checkpoint, tensor for tensor."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES, load_gguf_checkpoint

    from qcheck.eval.simulate import simulated_state_dict

    model_dir = exports[arch]
    gguf_file = model_dir / "model-f32.gguf"
    state, _ = simulated_state_dict(str(gguf_file), str(model_dir))
    gguf_arch = {"gemma3_text": "gemma3", "qwen2_moe": "qwen2moe"}.get(arch, arch)
    assert gguf_arch in GGUF_SUPPORTED_ARCHITECTURES or arch in GGUF_SUPPORTED_ARCHITECTURES
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    theirs = load_gguf_checkpoint(str(gguf_file), return_tensors=True, model_to_load=model)["tensors"]
    assert set(theirs) <= set(state)
    for name, tensor in theirs.items():
        assert torch.equal(state[name].reshape(tensor.shape), tensor.float()), name


def test_architecture_transformers_cannot_map_is_refused(exports, tmp_path):
    """A GGUF whose architecture neither transformers nor qcheck maps exactly: exit 2 naming it, never a number."""
    src = exports["llama"] / "model-f32.gguf"
    data = bytearray(src.read_bytes())
    # same byte length: 'llama' -> 'plamo' keeps every offset valid (plamo is a llama.cpp architecture
    # transformers has no GGUF loader for)
    patched = data.replace(b"llama", b"plamo")
    bad = tmp_path / "plamo.gguf"
    bad.write_bytes(bytes(patched))
    done = subprocess.run([sys.executable, "-m", "qcheck", "eval", "--reference", str(exports["llama"]),
                           "--candidate", f"x={bad}", "--tasks", "prose", "--max-items", "2",
                           "--cache-dir", str(tmp_path / "cache")],  # not the home directory's cache
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("qcheck: error:")]
    assert len(lines) == 1 and "cannot load GGUF architecture 'plamo'" in lines[0], done.stderr


def _llama_cpp_kld(base_gguf, quant_gguf, ids: list[int]) -> float:
    """What ``llama-perplexity --kl-divergence`` measures: llama.cpp's quantised logits against llama.cpp's own
    full-precision logits, over the same tokens (in process, through llama-cpp-python)."""
    from qcheck.eval.runners.llamacpp import LlamaCppRunner, log_softmax

    rows = []
    for path in (base_gguf, quant_gguf):
        runner = LlamaCppRunner(str(path), "x", n_ctx=512)
        runner.llm.reset()
        runner.llm.eval(ids)
        rows.append(log_softmax(np.asarray(runner.llm.scores[: len(ids)], dtype=np.float64)))
        runner.close()
    base, quant = rows
    return float((np.exp(base) * (base - quant)).sum(axis=1).mean())


@pytest.mark.parametrize("arch", CLI_ARCHS)
def test_q8_0_simulated_beside_llama_cpp(exports, arch, tmp_path):
    """Through the CLI, the F32 export measures ~0 and the simulated Q8_0 is close to what llama.cpp itself
    measures for the same Q8_0 file against its own F32 logits (llama-perplexity's KLD); llama.cpp also quantises
    activations to 8 bits, so its number is at least the weight-only one."""
    pytest.importorskip("llama_cpp")
    from transformers import AutoTokenizer

    model_dir = exports[arch]
    out = tmp_path / "eval.json"
    done = subprocess.run(
        [sys.executable, "-m", "qcheck", "eval", "--reference", str(model_dir),
         "--candidate", f"f32={model_dir / 'model-f32.gguf'}", "--candidate", f"q8={model_dir / 'model-q8_0.gguf'}",
         "--tasks", "prose", "--cache-dir", str(tmp_path / "cache"), "--json", "-o", str(out),
         "--simulate-engine", "weights"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    metrics = {c["name"]: c["metrics"] for c in json.loads(out.read_text())["candidates"]}
    assert metrics["f32"]["kld_mean"] < 1e-6
    q8 = metrics["q8"]["kld_mean"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = " ".join(json.loads(line)["text"] for line in
                    (REPO / "evals" / "prose.jsonl").read_text().splitlines()[:4])
    ids = tokenizer(text)["input_ids"][:256]
    assert (ids[0] == tokenizer.bos_token_id) == (arch not in NO_BOS)
    q8cpp = _llama_cpp_kld(model_dir / "model-f32.gguf", model_dir / "model-q8_0.gguf", ids)
    assert 0 < q8 < 0.01 and 0 < q8cpp < 0.01, (q8, q8cpp)
    assert q8cpp / 5 < q8 < q8cpp * 2, (q8, q8cpp)


#: llama.cpp's F32 logits against transformers' float32 ones on the same export (no quantisation at all): what is left
#: is kernel arithmetic and llama.cpp's F16 KV cache, ~1e-6 nats
F32_ENGINE_KLD = 1e-4


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "llama"])
def test_llama_cpp_f32_equals_transformers(exports, arch):
    """The Gemma 2 F32 gap (KLD 0.025 between llama.cpp and transformers on the same weights) was the tiny config's
    query_pre_attn_scalar (transformers' default 256 with head_dim 16), which llama.cpp ignores: it scales by
    1/sqrt(head_dim). With the released models' relation (query_pre_attn_scalar = head_dim) the engines agree."""
    pytest.importorskip("llama_cpp")
    from transformers import AutoModelForCausalLM

    from qcheck.eval.runners.llamacpp import LlamaCppRunner, attention_scale_note, log_softmax

    model_dir = exports[arch]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    assert attention_scale_note(model.config) is None
    ids = [1, *np.random.default_rng(0).integers(3, 512, 60).tolist()]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].double().log_softmax(-1).numpy()
    runner = LlamaCppRunner(str(model_dir / "model-f32.gguf"), "x", n_ctx=256)
    try:
        runner.llm.reset()
        runner.llm.eval(ids)
        cand = log_softmax(np.asarray(runner.llm.scores[: len(ids)], dtype=np.float64)).astype(np.float64)
    finally:
        runner.close()
    kld = float((np.exp(ref) * (ref - cand)).sum(axis=1).mean())
    assert kld < F32_ENGINE_KLD, f"{arch}: llama.cpp vs transformers F32 KLD {kld:.3e}"


def test_attention_scale_note_names_what_llama_cpp_ignores():
    """A Gemma config whose query_pre_attn_scalar llama.cpp does not use is named in the llama.cpp candidate's notes;
    the released shapes (2B: 256 = head_dim; 27B: 144 = hidden/heads at 46 layers) are not."""
    from transformers import AutoConfig

    from qcheck.eval.runners.llamacpp import attention_scale_note

    tiny = AutoConfig.for_model("gemma2", head_dim=16, hidden_size=64, num_attention_heads=4)
    note = attention_scale_note(tiny)
    assert note is not None and "1/sqrt(16)" in note and "query_pre_attn_scalar 256" in note
    assert attention_scale_note(AutoConfig.for_model("gemma2", head_dim=256, query_pre_attn_scalar=256)) is None
    g27 = AutoConfig.for_model("gemma2", hidden_size=4608, num_attention_heads=32, head_dim=128,
                               query_pre_attn_scalar=144, num_hidden_layers=46)
    assert attention_scale_note(g27) is None
    assert "1/sqrt(128)" in attention_scale_note(AutoConfig.for_model(
        "gemma2", hidden_size=4608, num_attention_heads=32, head_dim=128, query_pre_attn_scalar=144,
        num_hidden_layers=40))
    assert attention_scale_note(AutoConfig.for_model("llama")) is None
