"""Generate the bundled example checkpoints (deterministic: numpy only, fixed seed).

One tiny Llama (hidden 128, 2 layers, vocab 256: every dimension a multiple of 128 so the 128x128
block-FP8 and group-128 layouts apply) is written unquantised in BF16 and then re-packed the way
each producer packs it, using ``tests/support/packing.py`` (the reference packers that follow the producers'
sources): compressed-tensors FP8, DeepSeek block FP8, ModelOpt NVFP4, AutoAWQ GEMM, GPTQ with
act-order, mlx-lm affine 4-bit, plus GGUF files written with gguf-py's ``GGUFWriter`` and
``gguf.quants`` (Q8_0, Q4_0, MXFP4). A tiny gpt-oss-style MoE shows MXFP4 ``*_blocks``/``*_scales``.
The quantised checkpoints quantise the BF16-rounded weights, so the BF16 directory is their reference.

    python examples/make_examples.py            # (re)write everything under examples/
    python examples/make_examples.py --check    # fail if the files on disk differ from a fresh build
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# the reference packers are test support code (tests/support/), not part of the installed package
sys.path.insert(0, str(HERE.parent / "tests"))

from support import packing  # noqa: E402
from support.gguf_export import llama_permute  # noqa: E402

SEED = 20260601

LLAMA = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256, "max_position_embeddings": 2048,
}


def llama_config() -> dict:
    """A LlamaForCausalLM config.json as transformers writes it."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", **LLAMA,
        "hidden_act": "silu", "initializer_range": 0.02, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None,
        "pretraining_tp": 1, "use_cache": True, "torch_dtype": "bfloat16", "transformers_version": "4.56.0",
    }


def llama_state_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights (std 0.02, norms near 1), rounded to BF16 so every file quantises the same values."""
    h, i, layers = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["num_hidden_layers"]
    kv = LLAMA["num_key_value_heads"] * LLAMA["head_dim"]
    v = LLAMA["vocab_size"]

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    sd: dict[str, np.ndarray] = {"model.embed_tokens.weight": w(v, h)}
    for n in range(layers):
        p = f"model.layers.{n}"
        sd[f"{p}.input_layernorm.weight"] = (1.0 + rng.normal(0, 0.05, h)).astype(np.float32)
        sd[f"{p}.self_attn.q_proj.weight"] = w(h, h)
        sd[f"{p}.self_attn.k_proj.weight"] = w(kv, h)
        sd[f"{p}.self_attn.v_proj.weight"] = w(kv, h)
        sd[f"{p}.self_attn.o_proj.weight"] = w(h, h)
        sd[f"{p}.post_attention_layernorm.weight"] = (1.0 + rng.normal(0, 0.05, h)).astype(np.float32)
        sd[f"{p}.mlp.gate_proj.weight"] = w(i, h)
        sd[f"{p}.mlp.up_proj.weight"] = w(i, h)
        sd[f"{p}.mlp.down_proj.weight"] = w(h, i)
    sd["model.norm.weight"] = (1.0 + rng.normal(0, 0.05, h)).astype(np.float32)
    sd["lm_head.weight"] = w(v, h)
    return {k: packing.round_to(a, "BF16") for k, a in sd.items()}


# ------------------------------------------------------------------------------------------ tokenizer

#: ids 0-2: the special tokens (the config's bos_token_id 1 / eos_token_id 2); ids 3-255: the bytes
#: 0x00-0xFC (0xFD-0xFF never occur in UTF-8), as sentencepiece byte-fallback pieces ``<0xXX>``
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
#: sentencepiece's whitespace marker (U+2581): prepended to the text and substituted for every space
SPM_SPACE = "\u2581"


def byte_vocab() -> list[str]:
    """The 256 token strings by id, shared by the GGUF files' ``tokenizer.ggml.tokens`` and tokenizer.json."""
    return list(SPECIAL_TOKENS) + [f"<0x{b:02X}>" for b in range(LLAMA["vocab_size"] - len(SPECIAL_TOKENS))]


def tokenizer_json() -> dict:
    """A Llama-style (sentencepiece BPE, byte fallback) tokenizer.json with no merges: every character becomes
    its UTF-8 byte pieces, after ``\u2581`` is prepended and replaces spaces. This is exactly what llama.cpp's
    SPM tokenizer does with the GGUF vocabulary (``add_space_prefix`` and ``add_bos_token`` default to true
    for ``tokenizer.ggml.model = llama``), so the reference and llama.cpp produce the same ids."""
    def special(i: int, t: str) -> dict:
        return {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}

    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(i, t) for i, t in enumerate(SPECIAL_TOKENS)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM_SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        # bytes -> text first, then the space marker (made of byte pieces here) -> " ", minus the prefix space
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(byte_vocab())}, "merges": []},
    }


def write_tokenizer(out: Path) -> None:
    """tokenizer.json + tokenizer_config.json, loadable with ``AutoTokenizer.from_pretrained``."""
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(), indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
              "clean_up_tokenization_spaces": False, "model_max_length": LLAMA["max_position_embeddings"]}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


# ------------------------------------------------------------------------------------------ safetensors

def write_bf16(out: Path, sd: dict[str, np.ndarray]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(llama_config(), indent=2) + "\n")
    packing.save_safetensors(out / "model.safetensors", {k: (packing.encode_float(a, "BF16"), "BF16")
                                                         for k, a in sd.items()}, {"format": "pt"})
    write_tokenizer(out)


#: directory -> (packing scheme, options)
SAFETENSORS_EXAMPLES: dict[str, tuple[str, dict]] = {
    "tiny-llama-fp8-channel": ("fp8-channel", {}),
    "tiny-llama-fp8-block": ("fp8-block", {}),
    "tiny-llama-nvfp4": ("nvfp4-modelopt", {}),
    "tiny-llama-awq": ("awq", {}),
    "tiny-llama-gptq": ("gptq", {"act_order": True}),
    "tiny-llama-mlx-4bit": ("mlx", {"bits": 4, "group_size": 64}),
}


def write_quantised(out: Path, sd: dict[str, np.ndarray], scheme: str, options: dict) -> None:
    qc = packing.quantize_model(sd, scheme, **options)
    packing.write_checkpoint(out, llama_config(), qc)


# ------------------------------------------------------------------------------------------------ gpt-oss

GPT_OSS = {"hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128, "num_local_experts": 4,
           "num_experts_per_tok": 2}


def write_gpt_oss(out: Path, rng: np.random.Generator) -> None:
    """transformers' GptOssForCausalLM layout with ``quant_method: mxfp4`` on the experts only."""
    h, i, e = GPT_OSS["hidden_size"], GPT_OSS["intermediate_size"], GPT_OSS["num_local_experts"]
    q_out, kv_out = GPT_OSS["num_attention_heads"] * GPT_OSS["head_dim"], GPT_OSS["num_key_value_heads"] * 32
    v = GPT_OSS["vocab_size"]

    def w(*shape: int, std: float = 0.02) -> np.ndarray:
        return packing.round_to(rng.normal(0.0, std, size=shape).astype(np.float32), "BF16")

    tensors: packing.Tensors = {}

    def bf16(name: str, a: np.ndarray) -> None:
        tensors[name] = (packing.encode_float(a, "BF16"), "BF16")

    bf16("model.embed_tokens.weight", w(v, h))
    for n in range(GPT_OSS["num_hidden_layers"]):
        p = f"model.layers.{n}"
        bf16(f"{p}.input_layernorm.weight", 1.0 + w(h, std=0.05))
        bf16(f"{p}.post_attention_layernorm.weight", 1.0 + w(h, std=0.05))
        for proj, rows, cols in (("q_proj", q_out, h), ("k_proj", kv_out, h), ("v_proj", kv_out, h),
                                 ("o_proj", h, q_out)):
            bf16(f"{p}.self_attn.{proj}.weight", w(rows, cols))
            bf16(f"{p}.self_attn.{proj}.bias", w(rows))
        bf16(f"{p}.self_attn.sinks", w(GPT_OSS["num_attention_heads"]))
        bf16(f"{p}.mlp.router.weight", w(e, h))
        bf16(f"{p}.mlp.router.bias", w(e))
        # HF parameters gate_up_proj [E, H, 2I] and down_proj [E, I, H]; on disk transposed to [E, rows, in]
        gate_up = w(e, h, 2 * i)
        down = w(e, i, h)
        tensors.update(packing.pack_mxfp4_gptoss(gate_up.transpose(0, 2, 1), f"{p}.mlp.experts.gate_up_proj"))
        tensors.update(packing.pack_mxfp4_gptoss(down.transpose(0, 2, 1), f"{p}.mlp.experts.down_proj"))
        bf16(f"{p}.mlp.experts.gate_up_proj_bias", w(e, 2 * i))
        bf16(f"{p}.mlp.experts.down_proj_bias", w(e, h))
    bf16("model.norm.weight", 1.0 + w(h, std=0.05))
    bf16("lm_head.weight", w(v, h))
    cfg = {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", **GPT_OSS, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"], "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072, "attention_bias": True, "tie_word_embeddings": False,
        "swiglu_limit": 7.0, "router_aux_loss_coef": 0.9, "output_router_logits": False, "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096},
        "rope_theta": 150000.0, "initial_context_length": 4096, "eos_token_id": 2, "pad_token_id": 0,
        "quantization_config": packing.mxfp4_gptoss_config(
            ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    packing.save_safetensors(out / "model.safetensors", tensors, {"format": "pt"})


# --------------------------------------------------------------------------------------------------- GGUF

def gguf_tensors(sd: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """HF names -> llama.cpp names (gguf-py TensorNameMap for LLAMA), q/k permuted as the converter does."""
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for n in range(LLAMA["num_hidden_layers"]):
        for hf, gg in names.items():
            a = sd[f"model.layers.{n}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                a = llama_permute(a, LLAMA["num_attention_heads"])
            elif hf == "self_attn.k_proj":
                a = llama_permute(a, LLAMA["num_key_value_heads"])
            out.append((f"blk.{n}.{gg}.weight", a))
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    out.append(("output.weight", sd["lm_head.weight"]))
    return out


#: file name -> (general.file_type id, ggml type for 2-D weights, ggml type for output.weight)
GGUF_EXAMPLES = {
    "tiny-llama-Q8_0.gguf": (7, "Q8_0", "Q8_0"),
    "tiny-llama-Q4_0.gguf": (2, "Q4_0", "Q8_0"),
    "tiny-llama-MXFP4.gguf": (38, "MXFP4", "Q8_0"),
}


def write_gguf(path: Path, sd: dict[str, np.ndarray], file_type: int, weight_type: str, output_type: str) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(LLAMA["max_position_embeddings"])
    w.add_embedding_length(LLAMA["hidden_size"])
    w.add_block_count(LLAMA["num_hidden_layers"])
    w.add_feed_forward_length(LLAMA["intermediate_size"])
    w.add_head_count(LLAMA["num_attention_heads"])
    w.add_head_count_kv(LLAMA["num_key_value_heads"])
    w.add_rope_dimension_count(LLAMA["head_dim"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(LLAMA["vocab_size"])
    w.add_file_type(file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens = byte_vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * (len(tokens) - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for name, a in gguf_tensors(sd):
        if a.ndim == 1:
            w.add_tensor(name, a.astype(np.float32))
            continue
        qtype = gguf.GGMLQuantizationType[output_type if name == "output.weight" else weight_type]
        w.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------------------------------- README

#: example path -> what it is (the README's table; the third column is real ``qcheck inspect`` output)
DESCRIPTIONS = [
    ("tiny-llama-bf16/", "the unquantised reference: LlamaForCausalLM config.json + BF16 `model.safetensors` + "
     "byte-level tokenizer"),
    ("tiny-llama-fp8-channel/", "compressed-tensors FP8_DYNAMIC (`float-quantized`): F8_E4M3 `weight`, BF16 "
     "`weight_scale` [out, 1]"),
    ("tiny-llama-fp8-block/", "DeepSeek-style fine-grained FP8 (`quant_method: fp8`, `weight_block_size: [128, 128]`): "
     "F32 `weight_scale_inv` [out/128, in/128]"),
    ("tiny-llama-nvfp4/", "ModelOpt NVFP4 (`hf_quant_config.json` + `quant_method: modelopt`): U8 `weight` [out, in/2], "
     "F8_E4M3 `weight_scale` [out, in/16], F32 `weight_scale_2`, `input_scale`"),
    ("tiny-llama-awq/", "AutoAWQ GEMM 4-bit, group 128, zero point: `qweight` I32 [in, out/8], `qzeros`, F16 `scales`"),
    ("tiny-llama-gptq/", "GPTQ v1 4-bit, group 128, act-order (`desc_act: true`): `qweight` I32 [in/8, out], `qzeros`, "
     "`scales`, `g_idx`; also `quantize_config.json`"),
    ("tiny-llama-mlx-4bit/", "mlx-lm affine 4-bit, group 64: U32 `weight`, `scales`, `biases`; `quantization` block, "
     "`format: mlx` metadata"),
    ("tiny-gpt-oss-mxfp4/", "gpt-oss layout (`quant_method: mxfp4`): MoE experts as U8 `*_blocks` [E, rows, in/32, 16] "
     "+ `*_scales` (E8M0); attention, router, embeddings in BF16"),
    ("tiny-llama-Q8_0.gguf", "GGUF written with gguf-py's `GGUFWriter`, `general.file_type` 7 (Q8_0); norms F32"),
    ("tiny-llama-Q4_0.gguf", "GGUF Q4_0 (`general.file_type` 2); `output.weight` in Q8_0 (llama.cpp would use Q6_K, "
     "which gguf-py cannot quantise)"),
    ("tiny-llama-MXFP4.gguf", "GGUF with every 2-D weight in ggml's MXFP4 type (`general.file_type` 38, MXFP4_MOE); "
     "synthetic: llama.cpp itself uses MXFP4 only for MoE expert tensors"),
]

README_HEAD = """# Example checkpoints

Tiny, real checkpoints for trying qcheck and for its tests. All are generated by
[`make_examples.py`](make_examples.py) (numpy only, fixed seed, deterministic): one tiny Llama
(hidden 128, intermediate 256, 2 layers, 4 heads / 2 KV heads, vocabulary 256, 361,088 parameters;
every dimension a multiple of 128 so block-FP8 and group-128 layouts apply) with random weights
rounded to BF16, then packed the way each producer packs it by `tests/support/packing.py` (the reference
packers, which follow the producers' sources), plus a tiny gpt-oss-style MoE for MXFP4.
The quantised copies quantise exactly the BF16 values, so `tiny-llama-bf16` is their reference for
`qcheck eval`. The weights are random: the models produce noise, but the tensors are laid out as the
real producers lay them out. Checked on this machine (CPU): transformers 5.24 loads and runs
`tiny-llama-bf16`, and loads `tiny-llama-fp8-channel`, `tiny-llama-fp8-block` and
`tiny-gpt-oss-mxfp4` (dequantising them, as it does without a GPU); llama-cpp-python 0.3.36 loads
and evaluates the three GGUF files. Not checked here: AWQ/GPTQ (transformers needs gptqmodel/optimum),
ModelOpt NVFP4 (vLLM/TensorRT-LLM only; transformers does not read `modelopt`), MLX (needs mlx).

    python examples/make_examples.py           # rewrite everything, then this README from real output
    python examples/make_examples.py --check   # exit 1 if the files differ from a fresh build

`tiny-llama-bf16` has a tokenizer (`tokenizer.json`, `tokenizer_config.json`) that is the GGUF files'
256-token vocabulary: ids 0-2 are `<unk>`, `<s>` (BOS), `</s>` (EOS), ids 3-255 the bytes 0x00-0xFC
as sentencepiece byte pieces `<0xXX>` (0xFD-0xFF never occur in UTF-8). Text is encoded as llama.cpp
encodes it with that vocabulary: `\u2581` is prepended and replaces spaces, every character becomes its
UTF-8 bytes, BOS is added. So `qcheck eval` runs on the examples, and llama.cpp (`llamacpp:` candidates)
sees the same token ids as the reference.

K-quants (Q4_K_M ...) are missing because gguf-py 0.19.0 cannot quantise them
(`gguf.quants.quantize` raises NotImplementedError for Q4_K/Q6_K); use llama.cpp's
`llama-quantize` on `tiny-llama-Q8_0.gguf` or the BF16 model to make one.

## What `qcheck inspect` says

First line of `qcheck inspect <path>`, run in this directory:

| Path | What it is | `qcheck inspect` |
|---|---|---|
"""


def _inspect_text(root: Path, name: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "qcheck", "inspect", name], cwd=root, capture_output=True,
                          text=True, check=True)
    return proc.stdout


def write_readme(root: Path) -> None:
    """README.md with the real output of ``qcheck inspect`` for every example."""
    text = README_HEAD
    for path, what in DESCRIPTIONS:
        first_line = _inspect_text(root, path.rstrip("/")).splitlines()[0]
        text += f"| `{path}` | {what} | `{first_line}` |\n"
    text += ("\nThe full report for one of them (`qcheck inspect tiny-llama-gptq`):\n\n```\n"
             + _inspect_text(root, "tiny-llama-gptq") + "```\n\n"
             "`qcheck inspect PATH --json` prints the `qcheck.inspection/1` JSON record of the same\n"
             "(fields in docs/design.md).\n")
    text += EVAL_HEAD
    for args, comment in EVAL_RUNS:
        text += f"\n{comment}\n\n```\n$ qcheck {' '.join(args)}\n{_eval_text(root, args)}```\n"
    (root / "README.md").write_text(text)


EVAL_HEAD = """
## `qcheck eval` on the examples

`tiny-llama-bf16` is the reference of every quantised copy. The weights are random, so the model's
next-token distributions are nearly flat and the KL divergences are small in absolute terms, but
their order is the quantisation error's: Q8_0 and FP8 stay much closer to the reference than Q4_0.
On this machine's CPU each command below takes about 5 seconds (tests/test_examples_eval.py runs them).
Output as printed (run in this directory with an empty cache; the cache path is shown as the default
`~/.cache/qcheck` and the cache key as `<key>`):
"""

#: (qcheck arguments, what the run shows) for the README's eval section
EVAL_RUNS = [
    (["eval", "--reference", "tiny-llama-bf16", "--candidate", "q8=tiny-llama-Q8_0.gguf", "--candidate",
      "q4=tiny-llama-Q4_0.gguf", "--candidate", "fp8=tiny-llama-fp8-channel", "--tasks", "prose"],
     "Three candidates dequantised into the reference architecture (the default `simulated` backend):"),
    (["eval", "--reference", "tiny-llama-bf16", "--candidate", "q8=tiny-llama-Q8_0.gguf", "--candidate",
      "q4=tiny-llama-Q4_0.gguf", "--candidate", "fp8=tiny-llama-fp8-channel", "--tasks", "prose", "--max-kld",
      "1e-4"],
     "The same with a gate: `--max-kld 1e-4` fails Q4_0, and the exit code is 1:"),
    (["eval", "--reference", "tiny-llama-bf16", "--candidate", "q4=tiny-llama-Q4_0.gguf", "--candidate",
      "q4cpp=llamacpp:tiny-llama-Q4_0.gguf", "--tasks", "prose"],
     "Q4_0 simulated and under llama.cpp's own kernels (llama-cpp-python in process; it also quantises\n"
     "activations, so the two differ slightly):"),
]


def _eval_text(root: Path, args: list[str]) -> str:
    """``qcheck eval`` text output with a fresh cache, plus the exit code."""
    import os

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "QCHECK_CACHE_DIR": cache, "COLUMNS": "120"}
        proc = subprocess.run([sys.executable, "-m", "qcheck", *args], cwd=root, capture_output=True, text=True,
                              env=env)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"qcheck {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    # the fresh cache directory is shown as the default one, so the README does not change from run to run
    # (and the cache key, which hashes file metadata, as <key>)
    out = re.sub(r"ref-[0-9a-f]{64}", "ref-<key>", proc.stdout.replace(cache, "~/.cache/qcheck"))
    return out + f"$ echo $?\n{proc.returncode}\n"


# ------------------------------------------------------------------------------------------------ driver

def build(root: Path) -> list[Path]:
    """Write every example under ``root``; returns the paths written."""
    rng = np.random.default_rng(SEED)
    sd = llama_state_dict(rng)
    written = []
    write_bf16(root / "tiny-llama-bf16", sd)
    written.append(root / "tiny-llama-bf16")
    for name, (scheme, options) in SAFETENSORS_EXAMPLES.items():
        write_quantised(root / name, sd, scheme, options)
        written.append(root / name)
    write_gpt_oss(root / "tiny-gpt-oss-mxfp4", np.random.default_rng(SEED + 1))
    written.append(root / "tiny-gpt-oss-mxfp4")
    for name, (ft, wt, ot) in GGUF_EXAMPLES.items():
        write_gguf(root / name, sd, ft, wt, ot)
        written.append(root / name)
    return written


def _digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare a fresh build with the files on disk")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: this directory)")
    args = parser.parse_args(argv)
    if not args.check:
        for p in build(args.out):
            print(p.relative_to(args.out))
        write_readme(args.out)
        print("README.md")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = build(Path(tmp))
        bad = []
        for p in fresh:
            want = _digest(p)
            have = _digest(args.out / p.name) if (args.out / p.name).exists() else {}
            if want != have:
                bad.append(p.name)
    if bad:
        print("out of date: " + ", ".join(bad), file=sys.stderr)
        return 1
    print("examples are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
