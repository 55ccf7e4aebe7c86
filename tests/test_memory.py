"""Memory fit: KV cache arithmetic checked by hand for real model shapes, overheads, GPU counts."""

from __future__ import annotations

import json
import math

import pytest

from qcheck.errors import UsageError
from qcheck.kvtypes import kv_dtype_bytes
from qcheck.matrix import load_matrix
from qcheck.memory import GIB
from qcheck.model import AttentionLayout as KVLayout
from qcheck.model import Inspection, Quantization
from qcheck.model_shape import layout_from_config, layout_from_gguf
from qcheck.request import EngineKnobs
from support.memory_helpers import estimate

LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "torch_dtype": "bfloat16"}
#: an "80 GB" H100 as the CUDA driver reports it (matrices/gpus.toml capacity)
H100 = 79.19
LLAMA_70B = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
QWEN3_8B = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "sliding_window": None,
            "use_sliding_window": False}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
               "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
               "v_head_dim": 128, "vocab_size": 129280}
GEMMA3_27B = {"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32,
    "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024, "sliding_window_pattern": 6,
    "vocab_size": 262208}}
QWEN3_NEXT = {"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256,
              "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 12}


def _ins(cfg: dict, *, size: int, params: int | None = None, container: str = "safetensors", **kw) -> Inspection:
    c = cfg.get("text_config", cfg)
    return Inspection(path="m", container=container, parameters=params, size_bytes=size,
                      num_layers=c.get("num_hidden_layers"), hidden_size=c.get("hidden_size"),
                      num_attention_heads=c.get("num_attention_heads"), num_kv_heads=c.get("num_key_value_heads"),
                      head_dim=c.get("head_dim"), vocab_size=c.get("vocab_size"),
                      context_length=c.get("max_position_embeddings"), dtype=c.get("torch_dtype"), **kw)


def test_llama_8b_kv_cache_by_hand():
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131072 bytes per token; 8192 tokens = 1 GiB exactly
    est = estimate(_ins(LLAMA_8B, size=16_060_000_000), context=8192, config=LLAMA_8B, engine="vllm",
                          gpu_memory_gib=80)
    assert est.kv_bytes_per_token == 131072
    assert est.kv_cache_bytes == 1 * GIB
    assert est.kv_cache_dtype == "bfloat16"
    # batch scales it linearly; the inspection fields alone give the same layout
    est4 = estimate(_ins(LLAMA_8B, size=16_060_000_000), context=8192, batch=4)
    assert est4.kv_cache_bytes == 4 * GIB
    assert est.fits is True and est.gpus_needed == 1


def test_qwen3_head_dim_from_config_not_hidden_over_heads():
    lay = layout_from_config(QWEN3_8B)
    assert (lay.full_layers, lay.window_layers, lay.kv_heads, lay.k_dim) == (36, 0, 8, 128)
    est = estimate(_ins(QWEN3_8B, size=16_400_000_000), context=32768, config=QWEN3_8B)
    assert est.kv_cache_bytes == 2 * 36 * 8 * 128 * 2 * 32768  # 4.5 GiB


def test_mla_caches_the_latent_and_is_replicated_under_tensor_parallelism():
    lay = layout_from_config(DEEPSEEK_V3)
    assert lay.mla_dim == 576
    est = estimate(_ins(DEEPSEEK_V3, size=689_000_000_000), context=32768, config=DEEPSEEK_V3,
                          kv_cache_dtype="bf16", engine="vllm", gpu_memory_gib=141)
    assert est.kv_bytes_per_token == 61 * 576 * 2  # 70272 bytes: ~15x less than 128 full K/V heads
    assert est.kv_cache_bytes == 61 * 576 * 2 * 32768
    assert est.fits is False and est.gpus_needed == 8  # 689 GB / 8 = 80 GiB + the whole 2.1 GiB latent per GPU
    assert est.per_gpu_bytes is not None
    # each of the 8 GPUs holds the whole latent: half the context takes exactly half the latent off every GPU
    half = estimate(_ins(DEEPSEEK_V3, size=689_000_000_000), context=16384, config=DEEPSEEK_V3,
                    kv_cache_dtype="bf16", engine="vllm", gpu_memory_gib=141)
    assert est.per_gpu_bytes - half.per_gpu_bytes == 61 * 576 * 2 * 16384
    # the engine's buffers at 8 GPUs (activation peak, non-torch with all-reduce buffers, CUDA graphs)
    buffers8 = est.per_gpu_bytes - 689_000_000_000 // 8 - est.kv_cache_bytes
    assert buffers8 >= est.activation_bytes
    # max context at those 8 GPUs, each holding the whole latent of every cached token
    assert est.max_context_gpus == 8 and est.max_context is not None
    per_gpu_at_max = 689_000_000_000 // 8 + buffers8 + 61 * 576 * 2 * est.max_context
    assert per_gpu_at_max <= est.usable_bytes < per_gpu_at_max + 61 * 576 * 2


def test_sliding_window_layers_cache_only_the_window():
    lay = layout_from_config(GEMMA3_27B)
    assert (lay.full_layers, lay.window_layers, lay.window) == (10, 52, 1024)
    est = estimate(_ins(GEMMA3_27B, size=54_000_000_000), context=131072, config=GEMMA3_27B)
    per_layer = 16 * 2 * 128 * 2
    assert est.kv_cache_bytes == per_layer * (10 * 131072 + 52 * 1024)
    # llama.cpp keeps n_swa x n_seq_max + n_ubatch (512) tokens in a sliding-window layer's cache: llama-server's
    # default 4 slots share one pool (n_swa x 4 + 512), one slot (-np 1) keeps n_swa + 512
    cpp = estimate(_ins(GEMMA3_27B, size=54_000_000_000), context=131072, config=GEMMA3_27B,
                   engine="llama.cpp", kv_cache_dtype="bf16")
    assert cpp.kv_cache_bytes == per_layer * (10 * 131072 + 52 * (1024 * 4 + 512))
    one = estimate(_ins(GEMMA3_27B, size=54_000_000_000), context=131072, config=GEMMA3_27B,
                   engine="llama.cpp", kv_cache_dtype="bf16", knobs=EngineKnobs(n_parallel=1))
    assert one.kv_cache_bytes == per_layer * (10 * 131072 + 52 * (1024 + 512))
    # short contexts: the window does not matter
    short = estimate(_ins(GEMMA3_27B, size=54_000_000_000), context=512, config=GEMMA3_27B)
    assert short.kv_cache_bytes == per_layer * 62 * 512
    mistral = layout_from_config({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
                                  "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096})
    assert (mistral.full_layers, mistral.window_layers) == (0, 32)
    gemma2 = layout_from_config({"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584,
                                 "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                                 "sliding_window": 4096})
    assert (gemma2.full_layers, gemma2.window_layers) == (21, 21)


def test_linear_attention_layers_add_no_kv_cache():
    lay = layout_from_config(QWEN3_NEXT)
    assert (lay.full_layers, lay.window_layers) == (12, 0)
    assert any("linear attention" in n for n in lay.notes)
    est = estimate(_ins(QWEN3_NEXT, size=160_000_000_000), context=65536, config=QWEN3_NEXT)
    assert est.kv_cache_bytes == 12 * 2 * 2 * 256 * 2 * 65536


def test_gguf_metadata_layout_with_per_layer_heads_and_split_k_v_dims():
    md = {"general.architecture": "llama", "llama.block_count": 4, "llama.attention.head_count": 32,
          "llama.embedding_length": 4096, "llama.attention.head_count_kv": [8, 8, 4, 4],
          "llama.attention.key_length": 192, "llama.attention.value_length": 128}
    lay = layout_from_gguf(md)
    assert lay.elements_per_token_layer() == 6 * (192 + 128)
    ins = Inspection(path="m.gguf", container="gguf", size_bytes=10**9, num_layers=4)
    est = estimate(ins, context=1000, gguf_metadata=md, engine="llama.cpp")
    assert est.kv_cache_dtype == "f16"  # llama.cpp's default cache type
    assert est.kv_cache_bytes == 4 * 6 * 320 * 2 * 1024  # llama.cpp pads the cache to 256 cells
    mla = layout_from_gguf({"general.architecture": "deepseek2", "deepseek2.block_count": 61,
                            "deepseek2.attention.kv_lora_rank": 512, "deepseek2.rope.dimension_count": 64,
                            "deepseek2.attention.head_count": 128, "deepseek2.embedding_length": 7168})
    assert mla.mla_dim == 576 and mla.full_layers == 61
    g3 = layout_from_gguf({"general.architecture": "gemma3", "gemma3.block_count": 62,
                           "gemma3.attention.sliding_window": 1024, "gemma3.attention.head_count": 32,
                           "gemma3.attention.head_count_kv": 16, "gemma3.attention.key_length": 128,
                           "gemma3.attention.value_length": 128})
    assert (g3.full_layers, g3.window_layers, g3.window) == (10, 52, 1024)


@pytest.mark.parametrize(("dtype", "expected"), [("fp8", 1), ("fp8_e5m2", 1), ("float8_e4m3", 1), ("bf16", 2),
                                                 ("F16", 2), ("q8_0", 34 / 32), ("q4_0", 18 / 32),
                                                 ("nvfp4", 0.5625), ("float32", 4)])
def test_kv_dtype_sizes(dtype, expected):
    assert kv_dtype_bytes(dtype) == expected


def test_kv_dtype_choice_order_and_unknown_names():
    fp8_ckpt = _ins(LLAMA_8B, size=8_500_000_000, quantization=Quantization(method="fp8", kv_cache_dtype="float8_e4m3"))
    est = estimate(fp8_ckpt, context=8192, config=LLAMA_8B)
    assert est.kv_cache_dtype == "float8_e4m3" and est.kv_cache_bytes == GIB // 2
    est = estimate(fp8_ckpt, context=8192, config=LLAMA_8B, kv_cache_dtype="bfloat16")
    assert est.kv_cache_bytes == GIB  # the flag wins over the checkpoint
    est = estimate(fp8_ckpt, context=8192, config=LLAMA_8B, kv_cache_dtype="q8_0")
    assert est.kv_cache_bytes == GIB // 2 * 34 // 32
    # a type qcheck does not know the size of is not guessed: the KV cache is unknown, and says why (the verdict's
    # KV dimension says whether the engine accepts the name at all)
    est = estimate(fp8_ckpt, context=8192, kv_cache_dtype="fp7")
    assert est.kv_cache_bytes is None and est.fits is None
    assert any("does not know the size of the KV cache type fp7" in a for a in est.assumptions)


def test_k_and_v_cache_types_apart():
    # llama.cpp -ctk q8_0 -ctv q4_0: K 1024 elements x 34/32 B + V 1024 x 18/32 B per token per layer
    ins = _ins(LLAMA_8B, size=4_900_000_000, container="gguf")
    mixed = estimate(ins, context=8192, config=LLAMA_8B, kv_cache_dtype="q8_0,q4_0")
    assert mixed.kv_bytes_per_token == 32 * (1024 * 34 / 32 + 1024 * 18 / 32)
    assert mixed.kv_cache_bytes == 32 * 8192 * (1088 + 576)
    assert (mixed.kv_cache_dtype, mixed.kv_cache_type_k, mixed.kv_cache_type_v) == ("q8_0,q4_0", "q8_0", "q4_0")
    # one side given: the other keeps its default (f16 for a GGUF)
    k_only = estimate(ins, context=8192, config=LLAMA_8B, kv_cache_dtype=None)
    assert k_only.kv_cache_dtype == "f16" and k_only.kv_cache_bytes == 32 * 8192 * 2048 * 2
    # an MLA latent is one cache in the K type
    mla = estimate(_ins(DEEPSEEK_V3, size=10**9), context=1024, config=DEEPSEEK_V3, kv_cache_dtype="fp8,bfloat16")
    assert mla.kv_cache_bytes == 61 * 1024 * 576 * 1


def test_dequantising_fallback_counts_bf16_weights():
    gguf = Inspection(path="m.gguf", container="gguf", parameters=8_030_000_000, size_bytes=4_920_000_000,
                      num_layers=32, num_kv_heads=8, num_attention_heads=32, hidden_size=4096, vocab_size=128256,
                      quantization=Quantization(method="gguf", bits_per_weight=4.89))
    packed = estimate(gguf, context=4096)
    deq = estimate(gguf, context=4096, dequantized=True)
    assert (packed.weights_bytes, packed.weights_basis) == (4_920_000_000, "packed")
    assert (deq.weights_bytes, deq.weights_basis) == (16_060_000_000, "dequantized-bf16")
    gguf.parameters = None
    deq = estimate(gguf, context=4096, dequantized=True)
    assert deq.weights_bytes == int(4_920_000_000 * 16 / 4.89)


def _vllm_peak(tokens: int, rows: int, hidden: int, ff: int, vocab: int) -> int:
    """vLLM 0.21+'s profile peak written out from its operations (qcheck/memory/vllm_profile.py derives the same):
    the sampler run holds the BF16 logits of ``rows`` rows, their FP32 copy and FlashInfer's top-k mask and
    probabilities (2 + 4 + 4 + 4 B per vocabulary entry) beside the forward pass's hidden states and the sampled
    rows' two copies; the forward pass holds 4 hidden-sized and 3 feed-forward-sized BF16 activations per token; the
    cuBLAS workspace adds 32 MiB."""
    sampler = rows * vocab * 14 + tokens * hidden * 2 + 2 * rows * hidden * 2
    forward = tokens * (4 * hidden + 3 * ff) * 2
    return max(sampler, forward) + 32 * 2**20


def test_fit_and_tensor_parallel_count_for_llama_70b_bf16_on_h100():
    ins = _ins(LLAMA_70B, size=141_100_000_000, params=70_550_000_000)
    # an H100 as CUDA reports it (gpus.toml capacity), vLLM 0.33's defaults
    est = estimate(ins, context=8192, config=LLAMA_70B, engine="vllm", gpu_memory_gib=H100)
    vllm = load_matrix().engine("vllm").memory
    assert est.usable_bytes == math.ceil(int(H100 * GIB) * vllm.get("gpu_memory_utilization"))  # 0.92
    kv = 2 * 80 * 8 * 128 * 2 * 8192  # 2.5 GiB
    assert est.kv_cache_bytes == kv
    parts = {p.name: p.bytes for p in est.parts}
    # the profile run at the >= 70 GiB defaults (8192 tokens, 1024 sequences): on one GPU the forward pass (no
    # intermediate_size in this config: ff 4 x 8192) beats the sampler's 1024 rows
    peak = _vllm_peak(8192, 1024, 8192, 4 * 8192, 128256)
    assert peak == 8192 * (4 * 8192 + 3 * 4 * 8192) * 2 + 32 * 2**20
    assert parts["activation peak"] == peak == est.activation_bytes
    assert parts["non-torch"] == vllm.get("non_torch_mib") * 2**20
    # vLLM's CUDA-graph estimate: 51 capture sizes (1, 2, 4, 8 ... 248, 256 ... 512) at 80 layers
    assert parts["CUDA graphs"] == int((119 + 0.404 * 50 * 80) * 2**20)
    assert est.fixed_bytes == parts["non-torch"] + parts["CUDA graphs"]
    assert est.fits is False and est.parallelism == "tensor"
    # at 2 GPUs each holds half the weights and KV heads and half the MLP, so the sampler's peak (logits are
    # gathered whole on every rank) takes over; an H100 adds 2.2 GiB of NCCL NVLink SHARP and all-reduce buffers
    two = estimate(ins, context=8192, config=LLAMA_70B, engine="vllm", gpu_memory_gib=H100, tp=2)
    peak2 = _vllm_peak(8192, 1024, 8192, 2 * 8192, 128256)
    assert peak2 == 1024 * 128256 * 14 + 8192 * 8192 * 2 + 2 * 1024 * 8192 * 2 + 32 * 2**20
    assert vllm.get("non_torch_mib_multi_gpu") == 2250 and "h100" in vllm.get("nvls_gpus")
    at2 = 141_100_000_000 // 2 + kv // 2 + peak2 + 2250 * 2**20 + parts["CUDA graphs"]
    assert two.per_gpu_bytes == at2
    # 72.75 GiB of 72.85 usable at 0.92: two GPUs do
    assert at2 <= two.usable_bytes and two.fits is True and est.gpus_needed == 2
    # with --gpu-memory-utilization 0.95 two GPUs do
    from qcheck.request import EngineKnobs

    roomier = estimate(ins, context=8192, config=LLAMA_70B, engine="vllm", gpu_memory_gib=H100, tp=2,
                       knobs=EngineKnobs(gpu_memory_utilization=0.95))
    assert roomier.fits is True and roomier.usable_bytes == math.ceil(int(H100 * GIB) * 0.95)
    # 4 KV heads only: tensor parallelism stops at 4 GPUs, which is not enough on a 24 GiB card
    few_heads = dict(LLAMA_70B, num_key_value_heads=4)
    est = estimate(ins, context=8192, config=few_heads, engine="vllm", gpu_memory_gib=24)
    assert est.activation_bytes == _vllm_peak(2048, 256, 8192, 4 * 8192, 128256)  # 2048 tokens, 256 rows below 70 GiB
    assert est.fits is False and est.gpus_needed is None and est.max_gpus == 4
    assert "not even on 4" in est.summary()


def test_llama_cpp_splits_by_layers_with_any_gpu_count():
    ins = _ins(LLAMA_70B, size=42_500_000_000, container="gguf")  # a Q4_K_M 70B
    est = estimate(ins, context=8192, config=LLAMA_70B, engine="llama.cpp", gpu_memory_gib=16)
    assert est.parallelism == "layer-split"
    total = est.weights_bytes + est.kv_cache_bytes
    assert est.gpus_needed == 3  # (39.6 + 2.5) / 3 = 14.0 GiB + buffers < 14.5 GiB; 2 would not do
    assert est.per_gpu_bytes == -(-total // 3) + est.activation_bytes + est.fixed_bytes
    # llama.cpp's --fit keeps 1 GiB free per device, beside the CUDA context it finds in use
    assert est.usable_bytes == 16 * GIB - 522 * 2**20 - 1024 * 2**20


def test_without_a_gpu_memory_the_need_is_still_reported_as_json():
    est = estimate(_ins(LLAMA_8B, size=16_060_000_000), config=LLAMA_8B)
    assert est.context == 131072 and any("model's own maximum" in a for a in est.assumptions)
    assert est.fits is None and est.gpus_needed is None
    data = json.loads(json.dumps(est.to_json()))
    assert data["kv_cache_gib"] == 16.0 and data["weights_gib"] == round(16_060_000_000 / GIB, 2)
    assert "formula" in data and data["ignored"]


def test_unknown_layout_says_so_instead_of_guessing():
    est = estimate(Inspection(path="m", container="safetensors", size_bytes=10**9), context=4096)
    assert est.kv_cache_bytes is None
    assert any("KV cache not estimated" in a for a in est.assumptions)
    assert KVLayout().elements_per_token_layer() is None


@pytest.mark.parametrize("kwargs", [{"batch": 0}, {"context": 0}, {"gpu_memory_gib": -1}])
def test_bad_arguments_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        estimate(_ins(LLAMA_8B, size=1), **kwargs)


def test_apply_memory_fills_each_verdict_on_hardware():
    from qcheck.memory import apply_memory
    from qcheck.model import Verdict
    from qcheck.request import Deploy
    from support.memory_helpers import with_shape

    ins = with_shape(_ins(LLAMA_70B, size=141_100_000_000, params=70_550_000_000), config=LLAMA_70B)
    verdicts = [
        Verdict(engine="vllm", engine_version="0.33.0", gpu="h100", arch="hopper", compute_capability="9.0",
                status="native"),
        Verdict(engine="transformers", engine_version="5.24.0", gpu=None, arch="ampere", compute_capability="8.0",
                status="fallback", kernel="dequantised to BF16 at load", weights_loaded_as="bfloat16"),
        Verdict(engine="groq", engine_version=None, gpu=None, arch=None, compute_capability=None, status="unknown"),
        # a reason that reads like dequantising decides nothing: only the typed field does
        Verdict(engine="vllm", engine_version=None, gpu=None, arch="ampere", compute_capability="8.0",
                status="fallback", kernel="Marlin weight-only (weights dequantised inside the kernel)",
                reasons=["dequantises the whole model to BF16"]),
    ]
    apply_memory(verdicts, ins, Deploy(context=8192), load_matrix(), {"h100": 80.0}.get)
    h100, ampere, hosted, marlin = verdicts
    # the H100 as the CUDA driver reports it (79.19 GiB), vLLM 0.33's gpu_memory_utilization 0.92 of that: at 2 GPUs
    # the per-GPU weights, KV heads, sampler peak, NVLink SHARP buffers and CUDA graphs take 72.7 of 72.9 GiB
    assert h100.memory.gpus_needed == 2 and h100.memory.fits is False
    assert h100.memory.kv_cache_bytes == 2 * 80 * 8 * 128 * 2 * 8192
    assert "memory: needs 137.9 GiB, more than one h100 (72.9 GiB usable); 2 GPUs would (tensor)" in h100.warnings
    assert h100.memory.summary().startswith("needs 137.9 GiB on one GPU")
    assert h100.memory.capacity.startswith("79.19 GiB as the driver reports a h100 (81,559 MiB in nvidia-smi)")
    assert h100.memory.capacity_basis == "driver" and h100.memory.engine_version == "0.33.0"
    assert ampere.memory.fits is None and "GPU product" in ampere.memory.note
    assert ampere.memory.weights_basis == "dequantized-bf16" and ampere.memory.parallelism == "layer-split"
    assert ampere.memory.weights_bytes == 70_550_000_000 * 2 and ampere.memory.weights_loaded_as == "bfloat16"
    assert hosted.memory is None
    assert marlin.memory.weights_basis == "packed" and marlin.memory.weights_bytes == 141_100_000_000
    json.dumps([v.to_json() for v in verdicts])


def _cli(*args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_check_fills_verdict_memory_from_the_cli(tmp_path):
    from support.hubserver import gguf_bytes

    path = tmp_path / "m-Q8_0.gguf"
    gguf_bytes(str(path))  # llama: 2 layers, 8 heads, 2 KV heads, 64 wide -> head_dim 8
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--context", "1000",
                          "--batch", "2", "--json")
    assert code == 0, err
    (verdict,) = json.loads(out)["verdicts"]
    mem = verdict["memory"]
    # K+V x layers x kv heads x dim x f16 x (ctx x batch = 2000 cells, padded to 2048 as llama.cpp does)
    assert mem["kv_cache_bytes"] == 2 * 2 * 2 * 8 * 2 * 2048
    assert mem["kv_cache_dtype"] == "f16" and mem["fits"] is True and mem["gpus_needed"] == 1
    # an RTX 4090 as the CUDA driver reports it (23.65 GiB, not the marketed 24)
    assert mem["gpu_memory_bytes"] == int(23.65 * GIB) and mem["parallelism"] == "layer-split"
    assert mem["capacity_basis"] == "driver" and mem["engine_version"] == "b11312"
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--kv-cache-dtype",
                          "q8_0", "--json")
    assert code == 0, err
    assert json.loads(out)["verdicts"][0]["memory"]["context"] == 4096  # the model's own maximum
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--json")
    assert code == 0 and json.loads(out)["verdicts"][0]["memory"] is None  # only when asked
    # a type the engine does not accept is the engine's refusal (a verdict, exit 1), and its memory is not guessed
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--kv-cache-dtype", "fp7",
                          "--json")
    (verdict,) = json.loads(out)["verdicts"]
    assert code == 1 and verdict["status"] == "unsupported", err
    assert "llama.cpp does not accept --cache-type-k/--cache-type-v fp7" in verdict["reasons"][0]
    assert verdict["memory"]["kv_cache_bytes"] is None and verdict["memory"]["fits"] is None
    # a malformed name is a usage error before anything is read
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "-ctk", "q8_0;rm")
    assert code == 2 and "not a type name" in err
    code, out, err = _cli("check", str(path), "--engine", "llama.cpp", "--gpu", "rtx-4090", "--context", "8192")
    assert code == 0 and "memory:" in out
