"""docs/memory.md's worked examples, computed: each row is a published model (its config.json or GGUF keys and its
published file size) on an engine and a GPU, estimated through ``apply_memory`` (the code every front end calls).

``render()`` is the Markdown table between the ``worked-examples`` markers; tests/test_memory_validation.py keeps
the docs current, ``python bench/memory_examples.py --write`` regenerates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcheck.memory import GIB
from qcheck.model import Inspection, Quantization

START, END = "<!-- worked-examples:start -->", "<!-- worked-examples:end -->"

LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
LLAMA_70B = {**LLAMA_8B, "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
             "intermediate_size": 28672}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
               "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
               "v_head_dim": 128, "vocab_size": 129280, "intermediate_size": 18432, "moe_intermediate_size": 2048,
               "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
               "max_position_embeddings": 163840, "torch_dtype": "bfloat16"}
GEMMA3_27B = {"model_type": "gemma3", "text_config": {
    "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376, "num_attention_heads": 32,
    "num_key_value_heads": 16, "head_dim": 128, "intermediate_size": 21504, "sliding_window": 1024,
    "sliding_window_pattern": 6, "vocab_size": 262208, "max_position_embeddings": 131072},
    "torch_dtype": "bfloat16"}


def _gguf(arch: str, **keys: Any) -> dict[str, Any]:
    return {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in keys.items()}}


LLAMA_8B_GGUF = _gguf("llama", block_count=32, embedding_length=4096, feed_forward_length=14336, context_length=131072,
                      vocab_size=128256, **{"attention.head_count": 32, "attention.head_count_kv": 8})
GEMMA3_27B_GGUF = _gguf("gemma3", block_count=62, embedding_length=5376, feed_forward_length=21504,
                        context_length=131072, vocab_size=262208,
                        **{"attention.head_count": 32, "attention.head_count_kv": 16, "attention.key_length": 128,
                           "attention.value_length": 128, "attention.sliding_window": 1024})

GPUS = {"rtx-4090": ("ada", "8.9"), "h100": ("hopper", "9.0"), "h200": ("hopper", "9.0")}


@dataclass(frozen=True)
class Example:
    label: str
    engine: str
    version: str
    gpu: str
    size: int
    context: int | None
    config: dict[str, Any] | None = None
    gguf: dict[str, Any] | None = None
    quant: str = "none"
    kv: str | None = None
    params: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)


EXAMPLES = [
    Example("Llama-3.1-8B Q4_K_M GGUF (4.92 GB), llama.cpp, RTX 4090, 8k", "llama.cpp", "b11312", "rtx-4090",
            4_920_739_232, 8192, gguf=LLAMA_8B_GGUF, quant="gguf"),
    Example("same, 128k context", "llama.cpp", "b11312", "rtx-4090", 4_920_739_232, 131072, gguf=LLAMA_8B_GGUF,
            quant="gguf"),
    Example("same, Ollama's default context on a 4090 (23.65 GiB: < 24 GiB, 4k)", "ollama", "0.33.0rc2", "rtx-4090",
            4_920_739_232, None, gguf=LLAMA_8B_GGUF, quant="gguf"),
    Example("Llama-3.1-8B BF16 (16.06 GB), vLLM 0.33, H100, 16k", "vllm", "0.33.0", "h100", 16_060_522_496, 16000,
            config=LLAMA_8B),
    Example("same on vLLM 0.19 (sampler run before FlashInfer, no graph subtraction)", "vllm", "0.19.0", "h100",
            16_060_522_496, 16000, config=LLAMA_8B),
    Example("Llama-3.3-70B BF16 (141.1 GB), vLLM 0.33, H100, 8k", "vllm", "0.33.0", "h100", 141_107_412_992, 8192,
            config=LLAMA_70B),
    Example("DeepSeek-V3 FP8 (689 GB), vLLM 0.33, H200, 32k, KV bf16", "vllm", "0.33.0", "h200", 688_586_727_753,
            32768, config=DEEPSEEK_V3, quant="fp8", kv="bfloat16"),
    Example("Gemma-3-27B BF16 (54.9 GB), vLLM 0.33, H100, 128k", "vllm", "0.33.0", "h100", 54_867_331_744, 131072,
            config=GEMMA3_27B),
    Example("same on SGLang 0.5.23", "sglang", "0.5.23", "h100", 54_867_331_744, 131072, config=GEMMA3_27B),
    Example("Gemma-3-27B Q4_K_M (16.5 GB), llama.cpp, RTX 4090, 128k", "llama.cpp", "b11312", "rtx-4090",
            16_546_688_320, 131072, gguf=GEMMA3_27B_GGUF, quant="gguf"),
    Example("same, no --context: --fit lowers it", "llama.cpp", "b11312", "rtx-4090", 16_546_688_320, None,
            gguf=GEMMA3_27B_GGUF, quant="gguf"),
]


def inspection(ex: Example) -> Inspection:
    """The Inspection classify would give for the example's headers (shape from its config or GGUF keys)."""
    from qcheck.model_shape import shape_from

    cfg = ex.config or {}
    text = cfg.get("text_config", cfg)
    container = "gguf" if ex.gguf is not None else "safetensors"
    ins = Inspection(path="m.gguf" if ex.gguf is not None else "m", container=container, parameters=ex.params,
                     size_bytes=ex.size, num_layers=text.get("num_hidden_layers"),
                     hidden_size=text.get("hidden_size"), num_attention_heads=text.get("num_attention_heads"),
                     num_kv_heads=text.get("num_key_value_heads"), head_dim=text.get("head_dim"),
                     vocab_size=text.get("vocab_size"), context_length=text.get("max_position_embeddings"),
                     dtype=cfg.get("torch_dtype", text.get("torch_dtype")),
                     quantization=Quantization(method=ex.quant))
    if ex.gguf is not None:
        ins.context_length = ex.gguf.get(f"{ex.gguf['general.architecture']}.context_length")
        ins.num_layers = ex.gguf.get(f"{ex.gguf['general.architecture']}.block_count")
    ins.shape = shape_from(ins, config=ex.config, gguf_metadata=ex.gguf)
    return ins


def estimate(ex: Example) -> Any:
    """The example's MemoryEstimate through apply_memory."""
    from qcheck.matrix import load_matrix
    from qcheck.memory import apply_memory
    from qcheck.model import Verdict
    from qcheck.request import Deploy, EngineKnobs, KVCacheTypes

    arch, cc = GPUS[ex.gpu]
    verdict = Verdict(engine=ex.engine, engine_version=ex.version, gpu=ex.gpu, arch=arch, compute_capability=cc,
                      status="native")
    deploy = Deploy(ex.context, 1, KVCacheTypes.parse(ex.kv), knobs=EngineKnobs(**ex.knobs))
    apply_memory([verdict], inspection(ex), deploy, load_matrix())
    return verdict.memory


def _g(b: int | None) -> str:
    return "-" if b is None else f"{b / GIB:.2f}"


def row(ex: Example) -> str:
    est = estimate(ex)
    if est.fits:
        fits = "yes"
    elif est.offload is not None:
        fits = (f"no: `-ngl {est.offload.ngl}` of {est.offload.n_layers + 1} ({est.offload.gpu_bytes / GIB:.1f} GiB GPU, "
                f"{est.offload.ram_bytes / GIB:.1f} GiB RAM)")
    else:
        fits = "no"
    gpus = f"{est.gpus_needed} ({_g(est.per_gpu_bytes)})" if est.gpus_needed and est.gpus_needed > 1 else \
        str(est.gpus_needed or "-")
    full = est.model_context and est.max_context and est.max_context >= est.model_context
    ctx = "-" if est.max_context is None else f"{est.max_context}" + (" (all)" if full else "")
    if est.max_context_gpus > 1:
        ctx += f" on {est.max_context_gpus}"
    cells = [ex.label, str(est.context), _g(est.weights_bytes), _g(est.kv_cache_bytes),
             _g(est.activation_bytes + est.fixed_bytes), _g(est.total_bytes), _g(est.usable_bytes),
             _g(est.kv_available_bytes), fits, gpus, ctx]
    return "| " + " | ".join(cells) + " |"


def render() -> str:
    head = ["| model, engine, GPU, context | context | weights | KV | buffers | total (1 GPU) | usable | KV pool | fits "
            "| GPUs (each) | max context |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    return "\n".join([*head, *(row(ex) for ex in EXAMPLES)])


def docs_block(text: str) -> str:
    """The rendered block as docs/memory.md holds it."""
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")
