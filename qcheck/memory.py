"""Memory fit: will weights + KV cache + runtime overhead fit on a GPU, and if not, on how many?

The estimate, per GPU, for a tensor-parallel degree ``tp`` (docs/memory.md has the derivation and a
comparison with gguf-parser-go and hf-mem):

    weights/tp + KV(tp) + activations + fixed  <=  usable_fraction x GPU memory

* weights: the packed bytes of the checkpoint's weight files, or ``parameters x 2`` when the verdict is a
  fallback that dequantises the whole model to BF16/FP16.
* KV = batch x sum over attention layers of (tokens cached x bytes per token per layer), where a full-attention
  layer caches ``context`` tokens and a sliding-window layer ``min(context, window)``; bytes per token per layer
  are ``(k_dim + v_dim) x kv_heads x bytes(kv dtype)`` (GQA/MQA through ``kv_heads``), or for MLA (DeepSeek V2/V3,
  Kimi K2) the compressed latent ``(kv_lora_rank + qk_rope_head_dim) x bytes``. Under tensor parallelism each GPU
  holds ``ceil(kv_heads / tp)`` heads; an MLA latent is replicated on every GPU (vLLM stores it whole per rank).
* activations: ``tokens x hidden x 24 bytes + logits_rows x vocab x 4 bytes`` for one forward step of the engine's
  largest batch (vLLM: 2048 tokens and up to 256 sequences, 8192 and 1024 on GPUs of 70 GiB or more; llama.cpp:
  n_ubatch 512, whose output buffer gguf-parser-go counts as n_outputs x (n_embd + n_vocab) x 4).
* fixed: CUDA context, cuBLAS/NCCL workspaces and CUDA graphs, a stated constant per engine family.
* usable_fraction: vLLM pre-allocates ``gpu_memory_utilization`` (default 0.92) of the GPU and must fit
  everything inside it; llama.cpp uses what it allocates (1.0).

Ignored, and said so in the result: the KV cache's paging granularity, recurrent/linear-attention state (Mamba,
Qwen3-Next linear layers: constant in context), vision towers' activations, fragmentation, speculative decoding.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from qcheck.errors import UsageError
from qcheck.model import Inspection, Verdict
from qcheck.readers.gguf_meta import model_keys

GIB = 1024**3

#: bytes per cached element, by every spelling engines accept for --kv-cache-dtype
KV_DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "fp32": 4, "f32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "f16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float8_e4m3": 1, "float8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
    "int8": 1, "i8": 1, "int8_per_token_head": 1, "fp8_per_token_head": 1, "int4_per_token_head": 0.5,
    # llama.cpp --cache-type-k/-v block types (block bytes / 32 elements, ggml-common.h)
    "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
    # FP4 KV (TensorRT-LLM NVFP4 KV cache): 4-bit elements + one FP8 scale per 16
    "nvfp4": 0.5 + 1 / 16, "fp4": 0.5 + 1 / 16, "fp4_e2m1": 0.5 + 1 / 16, "nvfp4_4over6": 0.5 + 1 / 16,
}


@dataclass(frozen=True)
class Overhead:
    """What an engine needs beyond weights and KV cache, with where each number comes from."""

    fixed_bytes: int
    usable_fraction: float
    activation_tokens: int
    logits_rows: int
    source: str
    #: (tokens, logits rows) used instead on GPUs with at least 70 GiB (vLLM raises its batch defaults there)
    large_gpu: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def batch_for(self, gpu_memory_gib: float | None) -> tuple[int, int]:
        """(activation tokens, logits rows) of one forward step on a GPU of this size."""
        if self.large_gpu and gpu_memory_gib is not None and gpu_memory_gib >= 70:
            return self.large_gpu
        return self.activation_tokens, self.logits_rows


_SERVER = Overhead(
    fixed_bytes=int(1.5 * GIB), usable_fraction=0.92, activation_tokens=2048, logits_rows=256,
    large_gpu=(8192, 1024),
    source="vLLM vllm/config/cache.py gpu_memory_utilization default 0.92 (0.9 in earlier releases; @002f10e0): "
           "weights, activations and KV cache must fit in that fraction of the GPU; "
           "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: API server max_num_batched_tokens 2048 and "
           "max_num_seqs 256, or 8192 and 1024 on GPUs with >= 70 GiB (not A100); fixed 1.5 GiB for the CUDA "
           "context, NCCL/cuBLAS workspaces and CUDA graphs is qcheck's estimate, not a vLLM constant")
ENGINE_OVERHEAD: dict[str, Overhead] = {
    "vllm": _SERVER,
    "sglang": Overhead(fixed_bytes=int(1.5 * GIB), usable_fraction=0.88, activation_tokens=8192, logits_rows=256,
                       source="SGLang server_args: mem_fraction_static is chosen per GPU size (about 0.88 on "
                              "80 GB GPUs) and chunked_prefill_size 8192; fixed 1.5 GiB as for vLLM (qcheck's "
                              "estimate)"),
    "tensorrt-llm": Overhead(fixed_bytes=int(1.5 * GIB), usable_fraction=0.90, activation_tokens=8192,
                             logits_rows=256,
                             source="TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction 0.9 and max_num_tokens "
                                    "8192 (LLM API defaults); fixed 1.5 GiB (qcheck's estimate)"),
    "llama.cpp": Overhead(fixed_bytes=int(0.5 * GIB), usable_fraction=1.0, activation_tokens=512, logits_rows=512,
                          source="llama.cpp n_ubatch=512 (common/common.h); output buffer n_outputs x (n_embd + "
                                 "n_vocab) x 4 bytes as gguf-parser-go counts it (file_estimate__llamacpp.go "
                                 "@c3936a04); sliding-window cache n_swa + n_ubatch (llama-kv-cache-iswa.cpp); "
                                 "fixed 0.5 GiB for the CUDA context and compute-graph metadata (qcheck's "
                                 "estimate)"),
}
for _alias, _target in (("ollama", "llama.cpp"), ("lm-studio", "llama.cpp"), ("lmstudio", "llama.cpp"),
                        ("trtllm", "tensorrt-llm"), ("tensorrt_llm", "tensorrt-llm")):
    ENGINE_OVERHEAD[_alias] = ENGINE_OVERHEAD[_target]
DEFAULT_OVERHEAD = _SERVER
#: engines that split a model across GPUs by layers (pipeline style) rather than by heads
LAYER_SPLIT_ENGINES = {"llama.cpp", "ollama", "lm-studio", "lmstudio", "mlx", "mlx-lm", "transformers",
                       "exllamav2", "exllamav3", "audio.cpp"}
MAX_GPUS = 64


@dataclass
class KVLayout:
    """How much a model caches per token: per layer group, and which layers see the whole context."""

    full_layers: int = 0
    window_layers: int = 0
    window: int | None = None
    kv_heads: int | None = None
    k_dim: int | None = None
    v_dim: int | None = None
    mla_dim: int | None = None  # elements per token per layer for an MLA latent (no K/V split, no heads)
    per_layer_kv_heads: list[int] | None = None  # GGUF per-layer head_count_kv arrays
    notes: list[str] = field(default_factory=list)

    def elements_per_token_layer(self) -> float | None:
        """Cached elements per token per full layer (K+V over all KV heads, or the MLA latent)."""
        if self.mla_dim:
            return float(self.mla_dim)
        if self.per_layer_kv_heads and self.k_dim and self.v_dim:
            return sum(self.per_layer_kv_heads) / len(self.per_layer_kv_heads) * (self.k_dim + self.v_dim)
        if self.kv_heads and self.k_dim and self.v_dim:
            return float(self.kv_heads * (self.k_dim + self.v_dim))
        return None


@dataclass
class MemoryEstimate:
    """The memory-fit verdict, as the JSON ``Verdict.memory`` carries it (bytes, plus GiB for people)."""

    weights_bytes: int
    weights_basis: str  # "packed" | "dequantized-bf16" | "file size"
    kv_cache_bytes: int | None
    kv_cache_dtype: str
    kv_bytes_per_token: float | None
    context: int
    batch: int
    activation_bytes: int
    fixed_bytes: int
    total_bytes: int  # on one GPU (tp = 1)
    gpu_memory_bytes: int | None
    usable_bytes: int | None
    fits: bool | None
    gpus_needed: int | None
    parallelism: str  # "tensor" | "layer-split"
    per_gpu_bytes: int | None  # at gpus_needed
    max_gpus: int
    formula: str
    overhead_source: str
    assumptions: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("weights_bytes", "kv_cache_bytes", "total_bytes", "gpu_memory_bytes", "usable_bytes",
                    "per_gpu_bytes"):
            value = data[key]
            data[key.replace("_bytes", "_gib")] = None if value is None else round(value / GIB, 2)
        return data

    def summary(self, cpu: bool = False) -> str:
        """One line for people: 'needs 21.3 GiB (weights 4.9 + KV 16.0 + overhead 0.4); fits 24 GiB x 1'.

        ``cpu``: the target is a CPU, so the memory is RAM, not one GPU's."""
        def g(b: int | None) -> str:
            return "?" if b is None else f"{b / GIB:.1f}"

        parts = f"weights {g(self.weights_bytes)} + KV {g(self.kv_cache_bytes)} + overhead " \
                f"{g(self.activation_bytes + self.fixed_bytes)}"
        text = f"needs {g(self.total_bytes)} GiB {'of RAM' if cpu else 'on one GPU'} ({parts} GiB)"
        if cpu:
            return text
        if self.gpu_memory_bytes is None:
            return text
        if self.fits:
            return text + f"; fits in {g(self.usable_bytes)} of {g(self.gpu_memory_bytes)} GiB"
        if self.gpus_needed:
            how = "tensor parallelism" if self.parallelism == "tensor" else "a layer split"
            return text + f"; does not fit one GPU, needs {self.gpus_needed} with {how} " \
                          f"({g(self.per_gpu_bytes)} GiB each)"
        return text + f"; does not fit even on {self.max_gpus} GPUs"


# ------------------------------------------------------------------------------------------ KV layout
def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _pos_int(v: Any) -> int | None:
    """A positive count from a config or GGUF key, through the typed boundary (``qcheck.typed``)."""
    from qcheck.typed import pos_int

    return pos_int(v, maximum=1 << 40)


def layout_from_config(config: dict[str, Any]) -> KVLayout:
    """KV layout from a transformers ``config.json`` (the ``text_config`` of a multimodal model if present)."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    lay = KVLayout()
    layers = _pos_int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    heads = _pos_int(_first(cfg, "num_attention_heads", "n_head"))
    hidden = _pos_int(_first(cfg, "hidden_size", "n_embd", "d_model"))
    kv = _pos_int(_first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv"))
    if kv is None and cfg.get("multi_query") is True:
        kv = 1
    lay.kv_heads = kv or heads
    head_dim = _pos_int(cfg.get("head_dim")) or (hidden // heads if hidden and heads else None)
    lay.k_dim = lay.v_dim = head_dim
    kv_lora, rope = _pos_int(cfg.get("kv_lora_rank")), _pos_int(cfg.get("qk_rope_head_dim"))
    if kv_lora and rope:
        lay.mla_dim = kv_lora + rope
        lay.notes.append(f"MLA: caches the compressed latent kv_lora_rank + qk_rope_head_dim = {lay.mla_dim} "
                         "elements per token per layer")
    if not layers:
        return lay
    window = _pos_int(cfg.get("sliding_window"))
    types = cfg.get("layer_types")
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    if isinstance(types, list) and len(types) == layers:
        full = sum(1 for t in types if t in ("full_attention", "attention", "global_attention", "global"))
        swa = sum(1 for t in types if t in ("sliding_attention", "local_attention", "sliding", "local"))
        other = layers - full - swa
        if other:
            lay.notes.append(f"{other} layers without a growing KV cache (linear attention / state-space): "
                             "their constant-size state is ignored")
        lay.full_layers, lay.window_layers = full, (swa if window else 0)
        if swa and not window:
            lay.full_layers += swa
    elif window and _pos_int(cfg.get("sliding_window_pattern")):
        pattern = cfg["sliding_window_pattern"]
        lay.full_layers = layers // pattern
        lay.window_layers = layers - lay.full_layers
    elif window and model_type.startswith("gemma2"):
        lay.full_layers = layers // 2
        lay.window_layers = layers - lay.full_layers
    elif window and cfg.get("use_sliding_window") is not False and model_type in ("mistral", "mixtral", "phi3",
                                                                                  "starcoder2"):
        lay.window_layers = layers
    else:
        lay.full_layers = layers
    lay.window = window if lay.window_layers else None
    if lay.window_layers:
        lay.notes.append(f"sliding window: {lay.window_layers} of {layers} layers cache at most {window} tokens")
    return lay


def layout_from_gguf(metadata: dict[str, Any]) -> KVLayout:
    """KV layout from GGUF keys (``{arch}.block_count``, ``attention.head_count_kv``, ``key_length`` ...), read
    through the one GGUF view (``qcheck.readers.gguf_meta``)."""
    keys = model_keys(metadata)
    arch = keys.architecture
    lay = KVLayout()
    if arch is None:
        return lay
    layers = _pos_int(keys.block_count)
    hidden = _pos_int(keys.embedding_length)
    heads_n = _pos_int(keys.head_count)
    if keys.head_count_kv_per_layer is not None:
        lay.per_layer_kv_heads = list(keys.head_count_kv_per_layer)
        lay.kv_heads = keys.head_count_kv
    else:
        lay.kv_heads = _pos_int(keys.head_count_kv) or heads_n
    default_dim = hidden // heads_n if hidden and heads_n else None
    lay.k_dim = _pos_int(keys.key_length) or default_dim
    lay.v_dim = _pos_int(keys.value_length) or default_dim
    kv_lora, rope = _pos_int(keys.kv_lora_rank), _pos_int(keys.rope_dimension_count)
    if kv_lora and rope:
        lay.mla_dim = kv_lora + rope
        lay.notes.append(f"MLA: llama.cpp caches kv_lora_rank + n_rot = {lay.mla_dim} elements per token per layer")
    if not layers:
        return lay
    window = _pos_int(keys.sliding_window)
    pattern = _pos_int(keys.sliding_window_pattern)
    if window and pattern:
        lay.full_layers = layers // pattern
    elif window and arch == "gemma2":
        lay.full_layers = layers // 2
    elif window and arch == "gemma3":
        lay.full_layers = layers // 6
    else:
        lay.full_layers = layers
        if window:
            lay.notes.append("sliding_window is set but the layer pattern is unknown: every layer counted at "
                             "full context (an over-estimate)")
    lay.window_layers = layers - lay.full_layers
    lay.window = window if lay.window_layers else None
    if lay.window_layers:
        lay.notes.append(f"sliding window: {lay.window_layers} of {layers} layers cache at most {window} tokens")
    return lay


def layout_from_inspection(ins: Inspection) -> KVLayout:
    """The fallback when neither config.json nor GGUF metadata is at hand: the Inspection's own fields."""
    lay = KVLayout(full_layers=ins.num_layers or 0)
    lay.kv_heads = ins.num_kv_heads or ins.num_attention_heads
    dim = ins.head_dim or (ins.hidden_size // ins.num_attention_heads
                           if ins.hidden_size and ins.num_attention_heads else None)
    lay.k_dim = lay.v_dim = dim
    return lay


# ------------------------------------------------------------------------------------------ estimate
def kv_dtype_bytes(name: str) -> float:
    """Bytes per cached element for a --kv-cache-dtype value; an unknown name is a UsageError listing them."""
    key = name.strip().lower().replace("-", "_")
    if key not in KV_DTYPE_BYTES:
        raise UsageError(f"unknown KV cache dtype {name!r}; known: {', '.join(sorted(KV_DTYPE_BYTES))}")
    return KV_DTYPE_BYTES[key]


def _resolve_kv_dtype(ins: Inspection, requested: str | None, engine: str | None) -> tuple[str, str]:
    if requested and requested.lower() != "auto":
        kv_dtype_bytes(requested)
        return requested.lower(), "given with --kv-cache-dtype"
    declared = ins.quantization.kv_cache_dtype
    if declared and declared.lower().replace("-", "_") in KV_DTYPE_BYTES:
        return declared.lower(), "declared by the checkpoint"
    if ins.container == "gguf" or (engine or "").lower() in LAYER_SPLIT_ENGINES:
        return "f16", "llama.cpp's default --cache-type-k/-v f16"
    if ins.dtype and ins.dtype.lower() in KV_DTYPE_BYTES:
        return ins.dtype.lower(), "the model's dtype (engines' kv-cache-dtype 'auto')"
    return "bfloat16", "assumed bfloat16 (the model's dtype is not known)"


def _weights(ins: Inspection, dequantized: bool) -> tuple[int, str, list[str]]:
    notes: list[str] = []
    size = int(ins.size_bytes or 0)
    if not dequantized:
        return size, "packed", notes
    if ins.parameters:
        notes.append("dequantising fallback: weights held as BF16/FP16, 2 bytes x parameters")
        return int(ins.parameters) * 2, "dequantized-bf16", notes
    bpw = ins.quantization.bits_per_weight
    if bpw and bpw > 0:
        notes.append(f"dequantising fallback: parameters unknown, size x 16 / {bpw:g} bits per weight")
        return int(size * 16 / bpw), "dequantized-bf16", notes
    notes.append("dequantising fallback but neither parameters nor bits per weight are known: packed size used")
    return size, "file size", notes


def _power_of_two_candidates(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def estimate_memory(inspection: Inspection, *, context: int | None = None, batch: int = 1,
                    kv_cache_dtype: str | None = None, dequantized: bool = False,
                    gpu_memory_gib: float | None = None, overhead: Overhead | None = None,
                    engine: str | None = None, config: dict[str, Any] | None = None,
                    gguf_metadata: dict[str, Any] | None = None) -> MemoryEstimate:
    """Weights + KV cache + overhead against one GPU's memory, and the GPU count if one is not enough.

    ``context`` defaults to the model's own context length (4096 if unknown); ``config``/``gguf_metadata`` give
    the attention layout (GQA, MLA, sliding windows) when at hand, else the Inspection's fields are used.
    """
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, not {batch}")
    if context is not None and context < 1:
        raise UsageError(f"--context must be at least 1, not {context}")
    if gpu_memory_gib is not None and gpu_memory_gib <= 0:
        raise UsageError(f"GPU memory must be positive, not {gpu_memory_gib}")
    eng = (engine or "").lower()
    oh = overhead or ENGINE_OVERHEAD.get(eng, DEFAULT_OVERHEAD)
    assumptions: list[str] = []
    ignored = ["KV cache paging granularity and allocator fragmentation",
               "recurrent / linear-attention state (constant in context)",
               "vision encoders' activations and speculative-decoding drafts"]

    ctx = context or inspection.context_length or 4096
    if context is None:
        assumptions.append(f"context {ctx} = the model's own maximum" if inspection.context_length
                           else "context 4096 assumed (the model's maximum is unknown)")

    if config:
        lay = layout_from_config(config)
    elif gguf_metadata:
        lay = layout_from_gguf(gguf_metadata)
    else:
        lay = layout_from_inspection(inspection)
    if lay.full_layers == 0 and lay.window_layers == 0 and inspection.num_layers:
        lay.full_layers = inspection.num_layers
    assumptions.extend(lay.notes)

    weights, basis, wnotes = _weights(inspection, dequantized)
    assumptions.extend(wnotes)

    dtype, why = _resolve_kv_dtype(inspection, kv_cache_dtype, eng)
    elem_bytes = kv_dtype_bytes(dtype)
    assumptions.append(f"KV cache dtype {dtype} ({why})")
    per_layer = lay.elements_per_token_layer()
    kv_bytes: int | None
    per_token: float | None
    if per_layer is None or (lay.full_layers + lay.window_layers) == 0:
        kv_bytes, per_token = None, None
        assumptions.append("KV cache not estimated: the layer count or head layout is unknown")
    else:
        window = lay.window or ctx
        if eng in LAYER_SPLIT_ENGINES and lay.window_layers:
            # llama.cpp sizes a sliding-window cache n_swa + n_ubatch (llama-kv-cache-iswa.cpp size_swa)
            window += oh.activation_tokens
            assumptions.append(f"llama.cpp sliding-window cache: window + n_ubatch = {window} tokens")
        cached_tokens = lay.full_layers * ctx + lay.window_layers * min(ctx, window)
        kv_bytes = math.ceil(batch * cached_tokens * per_layer * elem_bytes)
        per_token = (lay.full_layers + lay.window_layers) * per_layer * elem_bytes

    hidden = _pos_int(inspection.hidden_size) or _pos_int((config or {}).get("hidden_size")) or 0
    vocab = _pos_int(inspection.vocab_size) or _pos_int((config or {}).get("vocab_size")) or 0
    step_tokens, step_rows = oh.batch_for(gpu_memory_gib)
    if eng in LAYER_SPLIT_ENGINES:  # llama.cpp: one ubatch of at most n_ctx tokens, all of them output rows
        tokens = rows = min(step_tokens, ctx)
    else:  # vLLM profiles its peak with the full token budget and max_num_seqs, whatever the traffic
        tokens, rows = step_tokens, step_rows
    activation = int(tokens * int(hidden) * 24 + rows * int(vocab) * 4)
    if not hidden or not vocab:
        assumptions.append("activation buffers partly unknown (hidden size or vocabulary missing)")
    fixed = oh.fixed_bytes
    total = weights + (kv_bytes or 0) + activation + fixed

    parallel = "layer-split" if eng in LAYER_SPLIT_ENGINES else "tensor"
    gpu_bytes = int(gpu_memory_gib * GIB) if gpu_memory_gib else None
    usable = int(gpu_bytes * oh.usable_fraction) if gpu_bytes else None
    fits: bool | None = None
    needed: int | None = None
    per_gpu: int | None = None
    if usable is not None:
        fits = total <= usable
        if parallel == "tensor":
            limit = MAX_GPUS
            if not lay.mla_dim and lay.kv_heads:
                limit = min(limit, lay.kv_heads)
            elif inspection.num_attention_heads:
                limit = min(limit, inspection.num_attention_heads)
            candidates = _power_of_two_candidates(max(1, limit))
        else:
            candidates = list(range(1, 17))
        for n in candidates:
            need = _per_gpu(weights, kv_bytes or 0, lay, n, parallel) + activation + fixed
            if need <= usable:
                needed, per_gpu = n, need
                break
        max_gpus = candidates[-1]
        if needed is None:
            how = ("power-of-two tensor parallelism, at most one GPU per KV head" if parallel == "tensor"
                   else "layer split")
            assumptions.append(f"does not fit on {max_gpus} GPUs ({how}); pipeline parallelism across nodes or a "
                               "smaller quantisation is needed")
    else:
        max_gpus = MAX_GPUS
    formula = ("per GPU: weights/tp + KV x ceil(kv_heads/tp)/kv_heads (MLA: whole KV) + activations + fixed "
               "<= usable_fraction x GPU memory; KV = batch x (full_layers x context + window_layers x "
               "min(context, window)) x per-layer bytes per token; activations = tokens x hidden x 24 + "
               "logits_rows x vocab x 4")
    return MemoryEstimate(
        weights_bytes=weights, weights_basis=basis, kv_cache_bytes=kv_bytes, kv_cache_dtype=dtype,
        kv_bytes_per_token=per_token, context=ctx, batch=batch, activation_bytes=activation, fixed_bytes=fixed,
        total_bytes=total, gpu_memory_bytes=gpu_bytes, usable_bytes=usable, fits=fits, gpus_needed=needed,
        parallelism=parallel, per_gpu_bytes=per_gpu, max_gpus=max_gpus, formula=formula,
        overhead_source=oh.source, assumptions=assumptions, ignored=ignored)


def _per_gpu(weights: int, kv: int, lay: KVLayout, n: int, parallel: str) -> int:
    if n == 1:
        return weights + kv
    if parallel == "layer-split":
        return math.ceil((weights + kv) / n)
    if lay.mla_dim:
        kv_share = kv  # the latent is replicated on every rank
    elif lay.kv_heads:
        kv_share = math.ceil(kv * math.ceil(lay.kv_heads / n) / lay.kv_heads)
    else:
        kv_share = math.ceil(kv / n)
    return math.ceil(weights / n) + kv_share


# ------------------------------------------------------------------------------------------ verdicts
_DEQUANT_RE = re.compile(r"(?i)dequanti[sz]\w*\s+(?:the\s+)?(?:whole|full|entire)\s+model|dequanti[sz]\w*\s+"
                         r"(?:\w+\s+)?to\s+(?:bf16|fp16|float16|bfloat16|f16)")


def is_dequantizing(verdict: Verdict) -> bool:
    """Whether a verdict's fallback holds the weights dequantised (the matrix rule says so in kernel or reasons)."""
    if verdict.status != "fallback":
        return False
    text = " ".join([verdict.kernel or "", *verdict.reasons])
    return bool(_DEQUANT_RE.search(text))


#: architectures whose "GPU" is the host CPU (matrices/gpus.toml, vendor "cpu"): memory there is RAM
CPU_ARCHS = frozenset({"x86", "arm"})


def apply_memory(verdicts: Iterable[Verdict], inspection: Inspection, *, gpu_memory_gib: Callable[[str], float | None],
                 context: int | None = None, batch: int = 1, kv_cache_dtype: str | None = None,
                 config: dict[str, Any] | None = None, gguf_metadata: dict[str, Any] | None = None) -> None:
    """Fill ``Verdict.memory`` for every verdict on hardware (hosted providers have none).

    ``gpu_memory_gib(gpu_id)`` gives a product's memory (``matrices/gpus.toml``); for an architecture or a
    compute capability there is no product, so the need is reported without a fit.
    """
    for v in verdicts:
        if v.gpu is None and v.arch is None:
            continue
        mem = gpu_memory_gib(v.gpu) if v.gpu else None
        est = estimate_memory(inspection, context=context, batch=batch, kv_cache_dtype=kv_cache_dtype,
                              dequantized=is_dequantizing(v), gpu_memory_gib=mem, engine=v.engine,
                              config=config, gguf_metadata=gguf_metadata)
        data = est.to_json()
        data["summary"] = est.summary(cpu=v.arch in CPU_ARCHS)
        if mem is None:
            data["note"] = ("name a GPU product (e.g. h100, rtx-4090) rather than an architecture to compare "
                            "with its memory")
        v.memory = data
        if est.fits is False:
            usable = (est.usable_bytes or 0) / GIB
            more = (f"; {est.gpus_needed} GPUs would ({est.parallelism})" if est.gpus_needed
                    else f"; not even {est.max_gpus}")
            v.warnings.append(f"memory: needs {est.total_bytes / GIB:.1f} GiB, more than one {v.gpu} "
                              f"({usable:.1f} GiB usable){more}")


def check_path_with_memory(target: str, engines: Iterable[str], gpus: Iterable[str], *, limits: Any = None,
                           require_native: bool = False, allow_unknown: bool = False, context: int | None = None,
                           batch: int = 1, kv_cache_dtype: str | None = None, all_models: bool = False,
                           options: dict[str, Any] | None = None) -> Any:
    """``qcheck check`` with ``Verdict.memory`` filled (``--context``/``--batch``/``--kv-cache-dtype``).

    ``qcheck.check.check_paths`` (usage errors first, a saved inspection or the headers, a pickle refused, every
    model with ``all_models``), with each model's Checkpoint kept for its attention layout (config.json, or the
    GGUF keys: GQA, MLA, sliding windows), which the Inspection alone does not carry; nothing is read twice.
    """
    from qcheck.check import check_paths
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.matrix import load_matrix

    limits = limits or DEFAULT_LIMITS
    engines, gpus = list(engines), list(gpus)
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, not {batch}")
    if context is not None and context < 1:
        raise UsageError(f"--context must be at least 1, not {context}")
    if kv_cache_dtype and kv_cache_dtype.lower() != "auto":
        kv_dtype_bytes(kv_cache_dtype)  # a usage error before anything is read
    matrix = load_matrix()

    def gpu_memory(gpu_id: str) -> float | None:
        gpu = matrix.gpus.gpus.get(gpu_id)
        return gpu.memory_gib if gpu is not None else None

    def annotator(_inspection: Inspection, checkpoint: Any) -> Callable[[Inspection, Verdict], None]:
        config: dict[str, Any] | None = None
        gguf_metadata: dict[str, Any] | None = None
        if checkpoint is not None:
            if checkpoint.container == "gguf":
                gguf_metadata = checkpoint.metadata
            elif isinstance(checkpoint.configs.get("config.json"), dict):
                config = checkpoint.configs["config.json"]

        def annotate(ins: Inspection, verdict: Verdict) -> None:
            apply_memory([verdict], ins, gpu_memory_gib=gpu_memory, context=context, batch=batch,
                         kv_cache_dtype=kv_cache_dtype, config=config, gguf_metadata=gguf_metadata)

        return annotate

    options = {**(options or {}), **({"kv_cache_dtype": kv_cache_dtype} if kv_cache_dtype else {})} or None
    return check_paths(target, engines, gpus, limits=limits, require_native=require_native,
                       allow_unknown=allow_unknown, all_models=all_models, matrix=matrix, annotator=annotator,
                       options=options)
