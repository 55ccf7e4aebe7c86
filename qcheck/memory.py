"""Memory fit: will weights + KV cache + the engine's own buffers fit on a device, and if not, how then?

Per device, for ``n`` devices (tensor parallelism or a layer split, as the engine places models):

    weights on the device + KV on the device + engine overhead(context, batch)  <=  usable(device)

* weights: the packed bytes of the checkpoint's tensors (GGUF file, safetensors shards), or ``parameters x 2`` when
  the verdict is a fallback that dequantises the whole model. llama.cpp keeps the token embeddings in host memory.
* KV = batch x sum over attention layers of (tokens cached x bytes per token per layer): a full-attention layer
  caches ``context`` tokens, a sliding-window layer ``min(context, window)``; bytes per token per layer are
  ``(k_dim + v_dim) x kv_heads x bytes(kv dtype)`` (GQA/MQA through ``kv_heads``), or for MLA the compressed latent
  ``(kv_lora_rank + qk_rope_head_dim) x bytes``. Under tensor parallelism each GPU holds ``ceil(kv_heads / tp)``
  heads; an MLA latent is replicated on every GPU.
* engine overhead and usable share: per engine, from its ``[memory]`` table (``qcheck/memory_engines.py``:
  llama.cpp compute/output buffers and ``--fit`` margin, vLLM's profiled activations and
  ``gpu_memory_utilization``, SGLang's reserved memory, TensorRT-LLM's KV fraction of free memory, MLX's wired
  limit on unified memory). An engine without memory data gets "overhead unknown", not another engine's numbers.

From the same terms: the largest context that fits at the batch, the largest batch at the context, the device
count, and for llama.cpp-family engines the offload plan (``-ngl``, ``--n-cpu-moe``) when one GPU is not enough.
Ignored, and said so in the result: the KV cache's paging granularity, recurrent/linear-attention state,
vision towers' activations, fragmentation, speculative decoding.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from qcheck.errors import UsageError
from qcheck.kvtypes import KV_DTYPE_BYTES, kv_dtype_bytes
from qcheck.memory_engines import Part
from qcheck.model import Inspection, Verdict
from qcheck.readers.gguf_meta import model_keys
from qcheck.speed import SpeedEstimate, estimate_speed

GIB = 1024**3
MAX_GPUS = 64
#: layer-split engines spread a model over at most this many devices
MAX_LAYER_SPLIT = 16



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
    text = config.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else config
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




@dataclass
class OffloadPlan:
    """llama.cpp's partial offload (JSON ``memory.offload``): ``-ngl`` layers on the GPU, or for MoE the
    ``--n-cpu-moe`` layers whose experts stay in RAM (the ``moe_*`` fields, only when such a plan fits)."""

    n_layers: int
    ngl: int
    gpu_bytes: int
    ram_bytes: int
    summary: str = ""
    n_cpu_moe: int | None = None
    moe_gpu_bytes: int | None = None
    moe_ram_bytes: int | None = None
    override_tensor: str | None = None  # the equivalent -ot pattern; None when no layer's experts move

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.n_cpu_moe is None:  # no MoE plan: the moe_* keys are absent, not null
            for key in ("n_cpu_moe", "moe_gpu_bytes", "moe_ram_bytes", "override_tensor"):
                del data[key]
        return data


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
    activation_bytes: int  # compute / activation buffers
    fixed_bytes: int  # output buffer, runtime, CUDA graphs, reserved
    total_bytes: int  # on one device (tp = 1), host-resident weights excluded
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
    #: where each number comes from: name, bytes, basis (header|formula|source|estimate|measured), how
    parts: list[Part] = field(default_factory=list)
    overhead_known: bool = True
    engine: str | None = None
    device: str = "GPU"  # GPU | RAM | unified
    host_bytes: int = 0  # weights the engine keeps in host memory (llama.cpp token embeddings)
    reserve: str = ""  # how usable_bytes was derived
    max_context: int | None = None  # largest context that fits at this batch, on max_context_gpus devices
    max_batch: int | None = None  # largest batch that fits at this context, on max_context_gpus devices
    #: the device count max_context / max_batch are judged at: 1, the --tp size, or gpus_needed when one GPU is
    #: not enough (tensor parallelism splits the KV heads, a layer split the layers)
    max_context_gpus: int = 1
    model_context: int | None = None
    offload: OffloadPlan | None = None
    #: weight bytes one decode step reads (MoE: the active experts' share) and the parameters they hold
    active_weight_bytes: int | None = None
    active_parameters: int | None = None
    tp: int | None = None  # the GPU count the user chose (--tp); fit and max context are per GPU at it
    #: filled by apply_memory: why there is no fit (an architecture, not a product), and the speed ceiling
    note: str | None = None
    speed: SpeedEstimate | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON ``verdicts[].memory``: the fields, each byte count in GiB too, the summary line, then the note
        and the speed record (with its summary line) when there are any."""
        data = asdict(self)
        del data["note"], data["speed"]
        if self.offload is not None:
            data["offload"] = self.offload.to_json()
        for key in ("weights_bytes", "kv_cache_bytes", "total_bytes", "gpu_memory_bytes", "usable_bytes",
                    "per_gpu_bytes"):
            value = data[key]
            data[key.replace("_bytes", "_gib")] = None if value is None else round(value / GIB, 2)
        data["summary"] = self.summary()
        if self.note is not None:
            data["note"] = self.note
        if self.speed is not None:
            data["speed"] = self.speed.to_json()
            data["speed_summary"] = self.speed.summary
        return data

    def summary(self) -> str:
        """One line for people, e.g. 'needs 6.2 GiB on one GPU (weights 4.4 + KV 1.0 + compute 0.3 GiB);
        fits in 23.0 GiB usable (24.0 GiB - llama.cpp's 1.0 GiB --fit margin); max context 131072'."""
        def g(b: int | None) -> str:
            return "?" if b is None else f"{b / GIB:.1f}"

        where = {"RAM": "in RAM", "unified": "in unified memory"}.get(self.device, "on one GPU")
        terms = [f"weights {g(self.weights_bytes)}", f"KV {g(self.kv_cache_bytes)}"]
        if self.overhead_known:
            terms += [f"{p.name} {g(p.bytes)}" for p in self.parts
                      if p.name not in ("weights", "KV cache", "weights in host memory") and p.bytes >= 0.05 * GIB]
            if not any(p.name not in ("weights", "KV cache", "weights in host memory") and p.bytes >= 0.05 * GIB
                       for p in self.parts):
                terms.append(f"buffers {g(self.activation_bytes + self.fixed_bytes)}")
        text = f"needs {g(self.total_bytes)} GiB {where} ({' + '.join(terms)} GiB)"
        if not self.overhead_known:
            text += f" + overhead unknown ({self.engine or 'this engine'} has no memory data)"
        if self.host_bytes >= 0.05 * GIB and self.device != "RAM":
            text += f", {g(self.host_bytes)} GiB more in RAM"
        if self.gpu_memory_bytes is None:
            return text
        if self.reserve:
            usable = f"{g(self.usable_bytes)} GiB usable ({self.reserve})"
        else:
            usable = f"{g(self.gpu_memory_bytes)} GiB"
        if self.tp and self.per_gpu_bytes is not None:
            text += f"; with --tp {self.tp}: {g(self.per_gpu_bytes)} GiB per GPU"
        if self.fits:
            text += f"; fits in {usable}"
        elif self.fits is None:
            text += f"; {usable}: fit unknown"
        elif self.tp:
            text += f"; does not fit {usable} at --tp {self.tp}" + \
                (f"; {self.gpus_needed} GPUs would" if self.gpus_needed else "")
        elif self.offload:
            text += f"; does not fit {usable}: {self.offload.summary}"
        elif self.gpus_needed:
            how = "tensor parallelism" if self.parallelism == "tensor" else "a layer split"
            text += f"; does not fit {usable}, needs {self.gpus_needed} with {how} ({g(self.per_gpu_bytes)} GiB each)"
        else:
            text += f"; does not fit {usable}, not even on {self.max_gpus}"
        if self.max_context is not None and (self.fits or self.max_context_gpus > 1):
            full = self.model_context and self.max_context >= self.model_context
            at = f" on {self.max_context_gpus} GPUs" if self.max_context_gpus > 1 and not self.tp else ""
            text += f"; max context {self.max_context}" + (" (the model's own)" if full else "") + at + \
                f" at batch {self.batch}"
        return text


# ------------------------------------------------------------------------------------------ KV dtype and weights
def _resolve_kv_dtype(ins: Inspection, requested: str | None, llamacpp: bool) -> tuple[str, str]:
    if requested and requested.lower() != "auto":
        kv_dtype_bytes(requested)
        return requested.lower(), "given with --kv-cache-dtype"
    declared = ins.quantization.kv_cache_dtype
    if declared and declared.lower().replace("-", "_") in KV_DTYPE_BYTES:
        return declared.lower(), "declared by the checkpoint"
    if ins.container == "gguf" or llamacpp:
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




def _engine_parallel(engine: str | None) -> Any:
    """The engine's ``[parallel]`` data (None: unknown engine or none): which GPU counts it can load."""
    if not engine:
        return None
    from qcheck.matrix import load_matrix

    try:
        return load_matrix().engine(engine).parallel
    except UsageError:
        return None


# ------------------------------------------------------------------------------------------ estimate
def engine_memory_params(engine: str | None) -> Any:
    """The engine's ``[memory]`` table from the matrix (None: unknown engine or no memory data)."""
    if not engine:
        return None
    from qcheck.matrix import load_matrix

    matrix = load_matrix()
    try:
        return matrix.engine(engine).memory
    except UsageError:
        return None


_LOOKUP: Any = object()


def _default_context(ins: Inspection, mem: Any, gpu_gib: float | None) -> tuple[int, str]:
    if mem is not None:
        by_vram = mem.bucket("default_context_by_vram", gpu_gib)
        if by_vram:
            ctx = int(by_vram[0])
            return ctx, f"context {ctx}: {mem.engine}'s default for a GPU of {gpu_gib:g} GiB"
        if mem.get("default_context"):
            ctx = int(mem.get("default_context"))
            return ctx, f"context {ctx}: {mem.engine}'s default"
    if ins.context_length:
        return ins.context_length, f"context {ins.context_length} = the model's own maximum"
    return 4096, "context 4096 assumed (the model's maximum is unknown)"


def estimate_memory(inspection: Inspection, *, context: int | None = None, batch: int = 1,
                    kv_cache_dtype: str | None = None, dequantized: bool = False,
                    gpu_memory_gib: float | None = None, engine: str | None = None, engine_memory: Any = _LOOKUP,
                    config: dict[str, Any] | None = None, gguf_metadata: dict[str, Any] | None = None,
                    tensors: dict[str, Any] | None = None, device: str = "GPU",
                    tp: int | None = None) -> MemoryEstimate:
    """Weights + KV cache + the engine's overhead against one device, the device count if one is not enough,
    the largest context and batch that fit, and the llama.cpp offload plan.

    ``engine_memory`` is the engine's ``[memory]`` parameters (default: looked up in the matrix by ``engine``);
    ``config``/``gguf_metadata`` give the attention layout, ``tensors`` the per-layer bytes; ``device`` is
    ``GPU``, ``RAM`` (``--gpu cpu``) or ``unified`` (Apple, GB10, Strix Halo); ``tp`` is a GPU count the user
    chose (``--tp``): the fit, max context and max batch are then per GPU at that count.
    """
    from qcheck.memory_engines import EnginePlan, Part, pad, search_max
    from qcheck.model_shape import shape_from

    if batch < 1:
        raise UsageError(f"--batch must be at least 1, not {batch}")
    if context is not None and context < 1:
        raise UsageError(f"--context must be at least 1, not {context}")
    if gpu_memory_gib is not None and gpu_memory_gib <= 0:
        raise UsageError(f"GPU memory must be positive, not {gpu_memory_gib}")
    eng = (engine or "").lower()
    mem = engine_memory_params(eng) if engine_memory is _LOOKUP else engine_memory
    llamacpp = mem is not None and mem.formula == "llama.cpp"
    assumptions: list[str] = []
    ignored = ["KV cache paging granularity and allocator fragmentation",
               "recurrent / linear-attention state (constant in context)",
               "vision encoders' activations and speculative-decoding drafts"]

    ctx, why_ctx = (context, "") if context else _default_context(inspection, mem, gpu_memory_gib)
    if not context and inspection.context_length and ctx > inspection.context_length:
        ctx = inspection.context_length  # engines cap their default at the model's trained context
        why_ctx += f", capped at the model's own {ctx}"
    if context and inspection.context_length and context > inspection.context_length:
        assumptions.append(f"context {context} is beyond the model's own maximum {inspection.context_length}")
    if why_ctx:
        assumptions.append(why_ctx)
    if config:
        lay = layout_from_config(config)
    elif gguf_metadata:
        lay = layout_from_gguf(gguf_metadata)
    else:
        lay = layout_from_inspection(inspection)
    if lay.full_layers == 0 and lay.window_layers == 0 and inspection.num_layers:
        lay.full_layers = inspection.num_layers
    assumptions.extend(lay.notes)
    shape = shape_from(inspection, config=config, gguf_metadata=gguf_metadata, tensors=tensors)

    weights, basis, wnotes = _weights(inspection, dequantized)
    if shape.from_tensors and basis == "packed":
        weights = shape.total_bytes  # tensor data only: the file also holds the header and vocabulary
    assumptions.extend(wnotes)
    scale = weights / shape.total_bytes if shape.total_bytes else 1.0

    dtype, why = _resolve_kv_dtype(inspection, kv_cache_dtype, llamacpp)
    elem_bytes = kv_dtype_bytes(dtype)
    assumptions.append(f"KV cache dtype {dtype} ({why})")
    per_layer = lay.elements_per_token_layer()
    n_ubatch = int(mem.get("n_ubatch", 512)) if llamacpp else 0
    kv_pad = int(mem.get("kv_pad", 1)) if llamacpp else 1

    def kv_at(c: int, b: int) -> int:
        if per_layer is None:
            return 0
        if llamacpp:
            # llama.cpp: n_ctx = pad(c x b, 256); one stream per sequence of pad(n_ctx / b, 256) cells
            # (llama-context.cpp); a sliding-window layer keeps pad(min(cells, n_swa + n_ubatch), 256) per
            # stream (llama-kv-cache-iswa.cpp size_swa)
            seq = pad(pad(c * b, kv_pad) // b, kv_pad)
            full = seq * b
            swa = pad(min(seq, (lay.window or seq) + n_ubatch), kv_pad) * b if lay.window_layers else 0
        else:
            full = c * b
            swa = min(c, lay.window or c) * b if lay.window_layers else 0
        return math.ceil((lay.full_layers * full + lay.window_layers * swa) * per_layer * elem_bytes)

    kv_bytes: int | None
    per_token: float | None
    if per_layer is None or (lay.full_layers + lay.window_layers) == 0:
        kv_bytes, per_token = None, None
        assumptions.append("KV cache not estimated: the layer count or head layout is unknown")
    else:
        kv_bytes = kv_at(ctx, batch)
        per_token = (lay.full_layers + lay.window_layers) * per_layer * elem_bytes
        if llamacpp and pad(ctx, kv_pad) != ctx:
            assumptions.append(f"llama.cpp pads each sequence's KV cache to a multiple of {kv_pad} cells")

    on_host = device != "RAM" and llamacpp
    host = int((shape.embed_bytes if not shape.tied_output else 0) * scale) if on_host else 0
    if host:
        assumptions.append("llama.cpp keeps the token embeddings (token_embd) in host memory: "
                           f"{host / GIB:.2f} GiB not on the GPU")
    dev_weights = weights - host
    gpu_bytes = int(gpu_memory_gib * GIB) if gpu_memory_gib else None

    plan = EnginePlan(mem, shape, gpu_memory_gib, device, lay.kv_heads, lay.k_dim,
                      lay.window if lay.window_layers else None) if mem is not None else None
    if plan is None:
        assumptions.append(f"{engine or 'no engine'}: no memory parameters in the matrix, so the engine's own "
                           "buffers and reservations are unknown (weights + KV only)")
    if not shape.hidden or not shape.vocab:
        assumptions.append("activation buffers partly unknown (hidden size or vocabulary missing)")

    def overhead(c: int, b: int, n: int = 1) -> list[Part]:
        return plan.overhead(c, b, n) if plan is not None else []

    reserve = plan.reserve(gpu_bytes) if plan is not None else None
    usable = reserve.usable_bytes if reserve is not None else gpu_bytes
    kv_scale = reserve.kv_scale if reserve is not None else 1.0
    placement = mem.placement if mem is not None else "tensor"

    def need(c: int, b: int, n: int = 1) -> int:
        kv = kv_at(c, b)
        extra = sum(p.bytes for p in overhead(c, b, n))
        return _per_gpu(dev_weights, math.ceil(kv * kv_scale), lay, n, placement) + extra

    parts = [Part("weights", dev_weights, "header", f"{basis} tensor bytes from the headers"
                  + (" (token embeddings in host memory excluded)" if host else ""))]
    if host:
        parts.append(Part("weights in host memory", host, "header", "token_embd stays in RAM (llama.cpp input layer)"))
    parts.append(Part("KV cache", kv_bytes or 0, "formula",
                      f"batch {batch} x cached tokens x {per_token or 0:g} B per token ({dtype})"))
    over = overhead(ctx, batch)
    parts.extend(over)
    activation = sum(p.bytes for p in over if p.name in ("compute buffer", "activations"))
    fixed = sum(p.bytes for p in over) - activation
    total = dev_weights + math.ceil((kv_bytes or 0) * kv_scale) + activation + fixed

    fits: bool | None = None
    needed: int | None = None
    per_gpu: int | None = None
    max_gpus = MAX_GPUS
    max_ctx = max_batch = None
    max_ctx_gpus = 1
    offload = None
    model_ctx = inspection.context_length
    n_dev = tp if tp and tp > 1 and device == "GPU" else 1
    if usable is not None:
        fits = (False if total > usable else None) if plan is None else total <= usable
        if n_dev > 1 and plan is not None:
            per_gpu = need(ctx, batch, n_dev)
            fits = per_gpu <= usable
            assumptions.append(f"--tp {n_dev}: {per_gpu / GIB:.1f} GiB per GPU ({placement})")
        if placement == "tensor":
            limit = MAX_GPUS
            if not lay.mla_dim and lay.kv_heads:
                limit = min(limit, lay.kv_heads)
            elif inspection.num_attention_heads:
                limit = min(limit, inspection.num_attention_heads)
            candidates = _power_of_two_candidates(max(1, limit))
            # only counts the engine can load: heads, KV heads, FP8 blocks and groups must divide (parallel.py)
            from qcheck.matrix.parallel import tp_problems

            spec = _engine_parallel(engine)
            refused = {n: tp_problems(inspection, n, spec) for n in candidates}
            if any(refused.values()):
                candidates = [n for n in candidates if not refused[n]] or [1]
                bad = ", ".join(f"--tp {n} ({problems[0]})" for n, problems in refused.items() if problems)
                assumptions.append(f"GPU counts the engine refuses for this checkpoint were skipped: {bad}")
        else:
            candidates = list(range(1, MAX_LAYER_SPLIT + 1))
        max_gpus = candidates[-1]
        if device == "GPU" and plan is not None:
            for n in candidates:
                per = need(ctx, batch, n)
                if per <= usable:
                    needed = n
                    per_gpu = per if n_dev == 1 else per_gpu
                    break
            if needed is None:
                how = ("power-of-two tensor parallelism, at most one GPU per KV head" if placement == "tensor"
                       else "layer split")
                assumptions.append(f"does not fit on {max_gpus} GPUs ({how}); pipeline parallelism across nodes or "
                                   "a smaller quantisation is needed")
        if plan is not None and kv_bytes is not None:
            top = model_ctx or (1 << 20)
            # at the GPU count the plan uses: the chosen --tp, else the count needed when one GPU is not enough
            at = n_dev if n_dev > 1 or fits or not needed else needed
            max_ctx_gpus = at
            max_ctx = search_max(lambda c: need(c, batch, at) <= usable, 1, max(top, 1))
            max_batch = search_max(lambda b: need(ctx, b, at) <= usable, 1, 4096)
        if llamacpp and fits is False and device == "GPU" and plan is not None and n_dev == 1:
            offload = _offload(shape, scale, kv_at(ctx, batch), overhead(ctx, batch), usable, lay)
    if shape.from_tensors:
        active_bytes = int(shape.active_bytes_per_token() * scale)
    else:
        active_bytes = weights
        if shape.moe or inspection.moe:
            assumptions.append("MoE without a tensor table: the speed estimate reads all experts (a lower bound)")
    active_params = None
    if inspection.parameters:
        share = shape.active_bytes_per_token() / shape.total_bytes if shape.from_tensors and shape.total_bytes else 1.0
        active_params = int(inspection.parameters * min(1.0, share))
    formula = ("per device: weights (/tp) + KV (x ceil(kv_heads/tp)/kv_heads; MLA whole) + the engine's "
               "overhead(context, batch) <= usable; KV = batch x (full_layers x context + window_layers x "
               "min(context, window)) x per-layer bytes per token; overhead and usable from the engine's [memory] "
               "data (docs/memory.md)")
    source = mem.source_text() if mem is not None else "none: the engine has no [memory] data"
    return MemoryEstimate(
        weights_bytes=weights, weights_basis=basis, kv_cache_bytes=kv_bytes, kv_cache_dtype=dtype,
        kv_bytes_per_token=per_token, context=ctx, batch=batch, activation_bytes=activation, fixed_bytes=fixed,
        total_bytes=total, gpu_memory_bytes=gpu_bytes, usable_bytes=usable, fits=fits, gpus_needed=needed,
        parallelism=placement, per_gpu_bytes=per_gpu, max_gpus=max_gpus, formula=formula,
        overhead_source=source, assumptions=assumptions, ignored=ignored, parts=parts,
        overhead_known=plan is not None, engine=engine, device=device, host_bytes=host,
        reserve=reserve.text if reserve is not None else "", max_context=max_ctx, max_batch=max_batch,
        max_context_gpus=max_ctx_gpus,
        model_context=model_ctx, offload=offload, tp=n_dev if n_dev > 1 else None, active_weight_bytes=active_bytes, active_parameters=active_params)


def _offload(shape: Any, scale: float, kv: int, over: list[Any], usable: int, lay: KVLayout) -> OffloadPlan | None:
    """llama.cpp's partial offload when the whole model does not fit one GPU: how many repeating layers
    (``-ngl``), or for MoE how many layers' experts stay in RAM (``--n-cpu-moe``), and the GPU/RAM split.

    ``-ngl N`` puts the last N repeating layers (their weights and KV cache) on the GPU, and the output layer
    when N exceeds the layer count (llama-model.cpp ``i_gpu_start``); ``--n-cpu-moe N`` keeps the expert tensors
    of the first N layers in RAM (common/arg.cpp, ``blk.N.ffn_(up|down|gate)_exps`` overrides).
    """
    n = len(shape.layer_bytes)
    if not n:
        return None
    layers = [int(b * scale) for b in shape.layer_bytes]
    experts = [int(b * scale) for b in shape.expert_bytes] or [0] * n
    kv_layer = kv / n
    buffers = sum(p.bytes for p in over)
    output = int((shape.output_bytes + shape.other_bytes + (shape.embed_bytes if shape.tied_output else 0)) * scale)
    total_weights = sum(layers) + output + int(shape.embed_bytes * scale * (0 if shape.tied_output else 1))
    best = 0
    for k in range(n, -1, -1):
        gpu = sum(layers[n - k:]) + kv_layer * k + buffers
        if gpu <= usable:
            best = k
            break
    gpu_dense = int(sum(layers[n - best:]) + kv_layer * best + buffers)
    plan = OffloadPlan(n_layers=n, ngl=best, gpu_bytes=gpu_dense,
                       ram_bytes=total_weights - sum(layers[n - best:]) + int(kv_layer * (n - best)))
    plan.summary = (f"offload {best} of {n} layers: -ngl {best} ({gpu_dense / GIB:.1f} GiB on the GPU, "
                    f"{plan.ram_bytes / GIB:.1f} GiB in RAM)") if best else \
        "not even one layer fits the GPU beside the buffers"
    if shape.moe and any(experts):
        dense_part = sum(layers) - sum(experts) + output + kv + buffers
        for cpu_layers in range(0, n + 1):
            gpu = dense_part + sum(experts[cpu_layers:])
            if gpu <= usable:
                ram = total_weights - (sum(layers) - sum(experts)) - output - sum(experts[cpu_layers:])
                layers_re = "|".join(str(i) for i in range(cpu_layers))
                plan.n_cpu_moe, plan.moe_gpu_bytes, plan.moe_ram_bytes = cpu_layers, int(gpu), int(ram)
                plan.override_tensor = (f"blk\\.({layers_re})\\.ffn_(up|down|gate)_exps\\.=CPU" if cpu_layers
                                        else None)
                plan.summary = (f"MoE: -ngl {n + 1} --n-cpu-moe {cpu_layers} keeps the experts of {cpu_layers} "
                                f"of {n} layers in RAM ({gpu / GIB:.1f} GiB on the GPU, {ram / GIB:.1f} GiB in "
                                "RAM)")
                break
    return plan


# ------------------------------------------------------------------------------------------ verdicts
# ------------------------------------------------------------------------------------------ verdicts
_DEQUANT_RE = re.compile(r"(?i)dequanti[sz]\w*\s+(?:the\s+)?(?:whole|full|entire)\s+model|dequanti[sz]\w*\s+"
                         r"(?:\w+\s+)?to\s+(?:bf16|fp16|float16|bfloat16|f16)")


def is_dequantizing(verdict: Verdict) -> bool:
    """Whether a verdict's fallback holds the weights dequantised (the matrix rule says so in kernel or reasons)."""
    if verdict.status != "fallback":
        return False
    text = " ".join([verdict.kernel or "", *verdict.reasons])
    return bool(_DEQUANT_RE.search(text))



def _device_of(matrix: Any, gpu_id: str | None, arch_id: str | None) -> str:
    """GPU, RAM (a CPU target) or unified (a GPU sharing the host's memory: Apple, GB10, Strix Halo, MI300A)."""
    arch = matrix.gpus.archs.get(arch_id) if arch_id else None
    if arch is not None and arch.vendor == "cpu":
        return "RAM"
    unified: frozenset[str] = getattr(matrix.gpus, "unified", frozenset())
    if (gpu_id and gpu_id in unified) or (arch is not None and (arch.vendor == "apple" or arch.id in unified)):
        return "unified"
    return "GPU"


def apply_memory(verdicts: Iterable[Verdict], inspection: Inspection, *,
                 gpu_memory_gib: Callable[[str], float | None] | None = None, matrix: Any = None,
                 context: int | None = None, batch: int = 1, kv_cache_dtype: str | None = None,
                 config: dict[str, Any] | None = None, gguf_metadata: dict[str, Any] | None = None,
                 tensors: dict[str, Any] | None = None, tp: int | None = None) -> None:
    """Fill ``Verdict.memory`` for every verdict on hardware (hosted providers have none).

    A product's memory comes from ``matrices/gpus.toml`` (or ``gpu_memory_gib(gpu_id)``); for an architecture
    or a compute capability there is no product, so the need is reported without a fit.
    """
    if matrix is None:
        from qcheck.matrix import load_matrix

        matrix = load_matrix()
    for v in verdicts:
        if v.gpu is None and v.arch is None:
            continue
        if gpu_memory_gib is not None:
            mem_gib = gpu_memory_gib(v.gpu) if v.gpu else None
        else:
            gpu = matrix.gpus.gpus.get(v.gpu) if v.gpu else None
            mem_gib = gpu.memory_gib if gpu is not None else None
        try:
            params = matrix.engine(v.engine).memory
        except UsageError:
            params = None
        device = _device_of(matrix, v.gpu, v.arch)
        est = estimate_memory(inspection, context=context, batch=batch, kv_cache_dtype=kv_cache_dtype,
                              dequantized=is_dequantizing(v), gpu_memory_gib=mem_gib, engine=v.engine,
                              engine_memory=params, config=config, gguf_metadata=gguf_metadata, tensors=tensors,
                              device=device, tp=tp)
        if mem_gib is None and device != "RAM":
            est.note = ("name a GPU product (e.g. h100, rtx-4090) rather than an architecture to compare "
                        "with its memory")
        perf = matrix.gpus.perf.get(v.gpu) if v.gpu else None
        arch = matrix.gpus.archs.get(v.arch) if v.arch else None
        if perf is not None and arch is not None and v.status != "unsupported":
            est.speed = estimate_speed(v, inspection, est, perf, arch.native_formats, est.active_weight_bytes,
                                       est.active_parameters)
        v.memory = est
        if est.fits is False:
            usable = (est.usable_bytes or 0) / GIB
            if est.offload:
                more = f"; {est.offload.summary}"
            elif est.gpus_needed:
                more = f"; {est.gpus_needed} GPUs would ({est.parallelism})"
            else:
                more = f"; not even {est.max_gpus}"
            v.warnings.append(f"memory: needs {est.total_bytes / GIB:.1f} GiB, more than one {v.gpu} "
                              f"({usable:.1f} GiB usable){more}")


def check_path_with_memory(target: str, engines: Iterable[str], gpus: Iterable[str], *, limits: Any = None,
                           require_native: bool = False, allow_unknown: bool = False, context: int | None = None,
                           batch: int = 1, kv_cache_dtype: str | None = None, all_models: bool = False,
                           gpu_memory: dict[str, float] | None = None, notes: Iterable[str] = (),
                           options: dict[str, Any] | None = None) -> Any:
    """``qcheck check`` with ``Verdict.memory`` filled (``--context``/``--batch``/``--kv-cache-dtype``).

    ``gpu_memory`` overrides the catalogue's memory per GPU id (``--gpu auto``: the detected free memory);
    ``notes`` are added to every result's warnings.

    ``qcheck.check.check_paths`` (usage errors first, a saved inspection or the headers, a pickle refused, every
    model with ``all_models``), with each model's Checkpoint kept for its attention layout (config.json, or the
    GGUF keys: GQA, MLA, sliding windows) and its tensor table (per-layer bytes for offload planning), which the
    Inspection alone does not carry; nothing is read twice.
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

    def annotator(_inspection: Inspection, checkpoint: Any) -> Callable[[Inspection, Verdict], None]:
        config: dict[str, Any] | None = None
        gguf_metadata: dict[str, Any] | None = None
        tensors: dict[str, Any] | None = None
        if checkpoint is not None:
            tensors = checkpoint.tensors
            if checkpoint.container == "gguf":
                gguf_metadata = checkpoint.metadata
            elif isinstance(checkpoint.configs.get("config.json"), dict):
                config = checkpoint.configs["config.json"]

        def annotate(ins: Inspection, verdict: Verdict) -> None:
            apply_memory([verdict], ins, matrix=matrix, gpu_memory_gib=memory_of, context=context, batch=batch,
                         kv_cache_dtype=kv_cache_dtype, config=config, gguf_metadata=gguf_metadata, tensors=tensors,
                         tp=(options or {}).get("tp"))

        return annotate

    def memory_of(gpu_id: str) -> float | None:
        if gpu_memory and gpu_id in gpu_memory:
            return gpu_memory[gpu_id]
        gpu = matrix.gpus.gpus.get(gpu_id)
        return gpu.memory_gib if gpu is not None else None

    options = {**(options or {}), **({"kv_cache_dtype": kv_cache_dtype} if kv_cache_dtype else {})} or None
    result = check_paths(target, engines, gpus, limits=limits, require_native=require_native,
                         allow_unknown=allow_unknown, all_models=all_models, matrix=matrix, annotator=annotator,
                         options=options)
    for one in getattr(result, "results", [result]):
        one.warnings.extend(notes)
    return result
