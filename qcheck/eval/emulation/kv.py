"""The KV cache and the attention dot products as an engine computes them, on a transformers model.

Why: a quantised KV cache can cost more than the weights (the issue's tiny model: llama.cpp q4_0 KV 85x its f16 KV
KLD), and what it costs depends on how the engine stores K and V *and* what it does to Q and to the attention
probabilities. The model's attention modules are switched to ``emulated_attention`` (a transformers attention
implementation registered under ``ATTENTION_NAME``), which applies, per layer, what the named engine does:

llama.cpp b11312 (llama-cpp-python 0.3.36), CPU, flash attention on (llama.cpp's own default, ``--flash-attn auto``;
a quantised V needs it: src/llama-context.cpp:3839-3849):
  - a quantised K (and V) is first rotated by an orthonormal Walsh-Hadamard matrix along the head dimension, Q with
    the same matrix, and the attention output rotated back for V (src/llama-kv-cache.cpp:315-340 ``attn_rot_k`` /
    ``attn_rot_v``: only for quantised types and head sizes divisible by 64; K uses the largest power of two
    dividing the head size, V order 64, :1450-1490; src/llama-graph.cpp:2883-2930; off with
    ``LLAMA_ATTN_ROT_DISABLE=1``);
  - K and V are stored in their type (``qcheck.eval.emulation.blocks``: 32-value blocks along the head dimension);
  - Q is converted to K's ``vec_dot_type`` before the dot product (ggml/src/ggml-cpu/ops.cpp:8917-8961:
    Q8_0 blocks for q8_0/q4_0/q5_0/iq4_nl K, Q8_1 for q4_1/q5_1, F16 for f16, per ggml-cpu.c ``type_traits_cpu``),
    except on the tiled path an f16 K and V take for 64 or more queries (ops.cpp:9546-9566), which keeps Q in f32;
  - softmax and the V product accumulate in float32 (quantised V is dequantised row by row, ops.cpp:9021-9024).
vLLM 0.34.0 and SGLang 0.5.23 on their Hopper default (FlashAttention 3) with an FP8 KV cache:
  - K and V are stored as FP8 ``(x / scale)``, the per-tensor scales from the checkpoint (``k_scale``, ``v_scale``,
    one ``kv_scale`` for both) or 1.0 when it ships none (vllm model_executor/layers/quantization/kv_cache.py:106-160;
    sglang mem_cache/memory_pool.py:2926-2931);
  - Q is quantised to FP8 too: vLLM per tensor with ``q_scale`` (the checkpoint's, else ``k_scale``; attention.py
    :491-552 ``query_quant``), SGLang cast without a scale (flashattention_backend.py:1425-1439);
  - FA3 converts the attention probabilities to FP8 for the P·V product after offsetting them to [0, 256]
    (vllm-project/flash-attention hopper/softmax.h ``Max_offset`` 8, mainloop_fwd_sm90_tma_gmma_ws.hpp
    ``convert_type<Element>(tSrS)``); the row sum stays float32.
``effects_left_out`` names what this does not reproduce, for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import UsageError
from qcheck.eval.emulation import blocks

ATTENTION_NAME = "qcheck_emulated"
#: queries per flash-attention call from which llama.cpp's CPU takes the tiled path for f32/f16 K and V
#: (GGML_FA_TILE_Q, ggml/src/ggml-cpu/common.h:9)
LLAMA_CPP_FA_TILE_Q = 64
#: K type -> the type Q is converted to for the dot product (ggml-cpu.c type_traits_cpu ``vec_dot_type``)
LLAMA_CPP_Q_TYPE = {"f32": "f32", "f16": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q8_0", "q5_0": "q8_0",
                    "iq4_nl": "q8_0", "q4_1": "q8_1", "q5_1": "q8_1"}
#: KV cache types each engine's emulation covers (llama.cpp ``--cache-type-k/-v``; vLLM/SGLang ``--kv-cache-dtype``)
ENGINE_TYPES: dict[str, tuple[str, ...]] = {
    "llama.cpp": tuple(LLAMA_CPP_Q_TYPE),
    "vllm": ("auto", "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2"),
    "sglang": ("auto", "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2"),
}
#: what each engine stores when no KV type is given
ENGINE_DEFAULT = {"llama.cpp": "f16", "vllm": "auto", "sglang": "auto"}
#: transformers model types whose Q/K head elements llama.cpp holds in another order: its converter permutes their
#: q/k projection rows for its "norm" (adjacent-pair) RoPE (conversion/llama.py:35 ``undo_permute``, :176-194;
#: granite.py:306-309; src/llama-model.cpp:3052-3095 ``LLAMA_ROPE_TYPE_NORM``), so its 32-value blocks and Hadamard
#: chunks hold other elements than transformers' order would
LLAMA_CPP_PERMUTED_QK = frozenset({"llama", "mistral", "mixtral", "granite", "granitemoe", "smollm3", "arcee",
                                   "apertus", "llama4_text"})
#: model types whose head order llama.cpp keeps (its "neox" RoPE, src/llama-model.cpp:3104-3170)
LLAMA_CPP_SAME_QK = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
                               "gemma3_text", "phi3", "phimoe", "starcoder2", "gpt_oss", "olmo2", "olmoe", "stablelm",
                               "falcon", "exaone", "exaone4", "nemotron", "gpt_neox", "minimax_m2", "lfm2",
                               "seed_oss", "hunyuan_v1_dense", "hunyuan_v1_moe", "ernie4_5"})
_SPELLINGS = {"fp8": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "float16": "f16",
              "fp16": "f16", "half": "f16", "bfloat16": "bf16", "float32": "f32", "fp32": "f32"}


def canonical_kv_type(engine: str, name: str | None) -> str:
    """The emulation's name for a KV type an engine was given (``fp8`` -> ``fp8_e4m3``, ``float16`` -> ``f16``); the
    engine's default for None; a UsageError for a type the emulation does not cover."""
    if name is None:
        return ENGINE_DEFAULT[engine]
    key = _SPELLINGS.get(name, name)
    if key not in ENGINE_TYPES[engine]:
        raise UsageError(f"KV cache type {name!r}: qcheck emulates {engine}'s KV cache in "
                         f"{', '.join(ENGINE_TYPES[engine])}; run the engine itself for other types")
    return key


@dataclass(frozen=True)
class KVScales:
    """Per-layer FP8 scales a checkpoint ships for its KV cache (and query), by decoder layer index."""

    k: dict[int, float] = field(default_factory=dict)
    v: dict[int, float] = field(default_factory=dict)
    q: dict[int, float] = field(default_factory=dict)

    @property
    def shipped(self) -> bool:
        return bool(self.k or self.v)


@dataclass(frozen=True)
class KVEmulation:
    """How one engine stores K and V and computes attention over them."""

    engine: str
    k: str
    v: str
    scales: KVScales = field(default_factory=KVScales)

    @property
    def label(self) -> str:
        return self.k if self.k == self.v else f"K {self.k}, V {self.v}"

    @property
    def changes_anything(self) -> bool:
        return not (self.k == self.v == "auto") and not (self.k == self.v == "f32")

    def describe(self) -> str:
        if self.engine == "llama.cpp":
            return (f"KV cache {self.label} as llama.cpp's CPU flash attention stores it; Q converted to "
                    f"{LLAMA_CPP_Q_TYPE[self.k]} for the dot product")
        if "fp8" not in self.k + self.v:
            return f"KV cache {self.label} ({self.engine}: the cache in that float type)"
        source = "the checkpoint's scales" if self.scales.shipped else "scale 1.0 (the checkpoint ships none)"
        q = "Q quantised to FP8 per tensor (q_scale)" if self.engine == "vllm" else "Q cast to FP8 without a scale"
        return (f"KV cache {self.label} as {self.engine}'s FlashAttention 3 path computes it: per-tensor {source}; "
                f"{q}; attention probabilities in FP8 for the P·V product")

    def effects_left_out(self) -> list[str]:
        out = []
        if self.engine == "llama.cpp":
            if "f16" in (self.k, self.v):
                out.append("llama.cpp's f16 V accumulation for fewer than 64 queries (ops.cpp:8993-9007): float32 here")
            out.append("llama.cpp's online-softmax rescaling order in flash attention")
        else:
            out.append(f"{self.engine}'s attention backend on GPUs other than Hopper (FlashInfer and Triton keep Q and "
                       "the probabilities in bf16)")
            out.append("FA3's running per-tile maximum when rounding probabilities (the row maximum here)")
            out.append("computation in bfloat16 around the cache (the simulation computes in its own dtype)")
        return out


def resolve(engine: str, k: str | None, v: str | None, scales: KVScales | None = None) -> KVEmulation:
    """The emulation of ``engine`` storing K as ``k`` and V as ``v`` (None: the engine's default)."""
    if engine not in ENGINE_TYPES:
        raise UsageError(f"no KV cache emulation for engine {engine!r}; known: {', '.join(ENGINE_TYPES)}")
    return KVEmulation(engine=engine, k=canonical_kv_type(engine, k), v=canonical_kv_type(engine, v),
                       scales=scales or KVScales())


# --------------------------------------------------------------------------------------------- attention
@dataclass
class _LayerState:
    """What one attention module does (attached to it as ``_qcheck_kv``)."""

    emulation: KVEmulation
    layer: int
    k_rotation: Any = None
    v_rotation: Any = None
    #: llama.cpp's order of a head's Q/K elements (rope "norm" architectures), None when it is transformers' own
    order: Any = None
    calls: list[int] = field(default_factory=lambda: [0])


def _llama_cpp(state: _LayerState, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any, Callable[[Any], Any] | None]:
    emu = state.emulation
    post = None
    if state.order is not None:
        q, k = q[..., state.order], k[..., state.order]
    if state.k_rotation is not None:
        q, k = blocks.rotate(q, state.k_rotation), blocks.rotate(k, state.k_rotation)
    if state.v_rotation is not None:
        v = blocks.rotate(v, state.v_rotation)
        rot = state.v_rotation

        def post(out: Any) -> Any:
            return blocks.rotate(out, rot)
    k = blocks.round_to(k, emu.k)
    v = blocks.round_to(v, emu.v)
    tiled = emu.k == emu.v and emu.k in ("f32", "f16") and q.shape[-2] >= LLAMA_CPP_FA_TILE_Q
    if not tiled:
        q = blocks.round_to(q, LLAMA_CPP_Q_TYPE[emu.k])
    return q, k, v, post


def _fp8_engine(state: _LayerState, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any, Callable[[Any], Any] | None]:
    emu, layer = state.emulation, state.layer
    if emu.k in blocks.FLOAT_TYPES:
        k = blocks.round_to(k, emu.k)
    if emu.v in blocks.FLOAT_TYPES:
        v = blocks.round_to(v, emu.v)
    ks, vs = emu.scales.k.get(layer, 1.0), emu.scales.v.get(layer, 1.0)
    if emu.k.startswith("fp8"):
        k = blocks.fp8(k, emu.k[4:], ks)
    if emu.v.startswith("fp8"):
        v = blocks.fp8(v, emu.v[4:], vs)
    if emu.k == "fp8_e4m3" and emu.engine == "vllm":
        q = blocks.fp8(q, "e4m3", emu.scales.q.get(layer, ks))
    elif emu.k.startswith("fp8") and emu.engine == "sglang":
        q = blocks.fp8(q, emu.k[4:], 1.0)
    return q, k, v, None


def _fp8_probabilities(state: _LayerState) -> str | None:
    """The FP8 kind FA3 rounds the probabilities to, or None."""
    emu = state.emulation
    if emu.engine == "vllm" and emu.k == "fp8_e4m3":
        return "e4m3"
    if emu.engine == "sglang" and emu.k.startswith("fp8"):
        return emu.k[4:]
    return None


def emulated_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, None]:
    """A transformers attention function: eager attention in float32 with the layer's KV emulation applied.

    Queries (batch, heads, q, d), keys and values (batch, kv heads, k, d) come after RoPE (and any q/k norm), as
    an engine caches them. Soft-capping (Gemma 2) and attention sinks (gpt-oss ``s_aux``) are applied as the
    model's own eager attention applies them; sliding windows and padding come in ``attention_mask``."""
    import torch

    state: _LayerState | None = getattr(module, "_qcheck_kv", None)
    q, k, v = query.float(), key.float(), value.float()
    post = None
    if state is not None:
        state.calls[0] += 1
        prepare = _llama_cpp if state.emulation.engine == "llama.cpp" else _fp8_engine
        q, k, v, post = prepare(state, q, k, v)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    sinks = kwargs.get("s_aux")
    if sinks is None and getattr(module, "sinks", None) is not None and "gpt_oss" in type(module).__module__:
        sinks = module.sinks
    scores = _Scores(scale=scaling if scaling is not None else q.shape[-1] ** -0.5, softcap=kwargs.get("softcap"),
                     sinks=None if sinks is None else sinks.float().reshape(1, -1, 1, 1),
                     fp8_probabilities=_fp8_probabilities(state) if state is not None else None)
    # queries in blocks: (batch x heads x block x keys) float32 scores stay within SCORE_BLOCK_BYTES at any length
    step = max(1, SCORE_BLOCK_BYTES // (4 * q.shape[0] * q.shape[1] * max(1, k.shape[-2])))
    out = torch.cat([scores.attend(q[..., a:a + step, :], k, v, _block_mask(attention_mask, a, step, q, k))
                     for a in range(0, q.shape[-2], step)], dim=-2)
    if post is not None:
        out = post(out)
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def _block_mask(mask: Any, start: int, step: int, q: Any, k: Any) -> Any:
    """The boolean mask (True: attend) of queries ``start .. start + step``: the model's own (sdpa's boolean mask,
    with padding and sliding windows), else plain causal, the queries being the last ``q`` positions of ``k``."""
    import torch

    if mask is not None:
        return mask[..., start:start + step, : k.shape[-2]]
    n_q, n_k = q.shape[-2], k.shape[-2]
    rows = torch.arange(start, min(start + step, n_q), device=q.device) + (n_k - n_q)
    return torch.arange(n_k, device=q.device)[None, :] <= rows[:, None]


#: float32 bytes of one block of attention scores (``emulated_attention`` processes queries in such blocks)
SCORE_BLOCK_BYTES = 16 << 20


@dataclass(frozen=True)
class _Scores:
    """Softmax attention over one block of queries, as the engine rounds it."""

    scale: float
    softcap: float | None
    sinks: Any
    fp8_probabilities: str | None

    def attend(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        """Attention of these queries over every key; ``mask`` (boolean, True: attend, or additive float)."""
        import torch

        s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if self.softcap:
            s = torch.tanh(s / self.softcap) * self.softcap
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
        m = s.amax(dim=-1, keepdim=True)
        if self.sinks is not None:
            m = torch.maximum(m, self.sinks)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a query that sees nothing (a pad row)
        p = torch.exp(s - m)
        total = p.sum(dim=-1, keepdim=True)
        if self.sinks is not None:
            total = total + torch.exp(self.sinks - m)
        if self.fp8_probabilities is not None:
            p = blocks.fp8(p * 256.0, self.fp8_probabilities, 1.0) / 256.0
        return torch.matmul(p, v) / total.clamp_min(torch.finfo(torch.float32).tiny)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, emulated_attention)
    # sdpa's masks: boolean (a float mask would be a float32 queries x keys tensor per sequence), or None when plainly
    # causal (``_block_mask`` builds each block's then)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)


def _attention_modules(model: Any) -> list[tuple[int, Any]]:
    """(layer index, module) of every attention module: the ones with a ``layer_idx`` that compute Q/K/V."""
    out = []
    for _, module in model.named_modules():
        layer = getattr(module, "layer_idx", None)
        if isinstance(layer, int) and hasattr(module, "scaling") and hasattr(module, "num_key_value_groups"):
            out.append((layer, module))
    return out


def _head_dims(model: Any) -> tuple[int | None, int | None]:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
    dim = getattr(cfg, "head_dim", None) or (int(cfg.hidden_size) // heads if heads else None)
    return dim, dim


def llama_cpp_order(model_type: str | None, head_dim: int) -> tuple[list[int] | None, str | None]:
    """(llama.cpp's order of a head's Q/K elements as indices into transformers' order, or None when they agree;
    a note when the architecture is not known)."""
    if model_type in LLAMA_CPP_PERMUTED_QK:
        half = head_dim // 2
        return [j // 2 if j % 2 == 0 else half + j // 2 for j in range(head_dim)], None
    if model_type in LLAMA_CPP_SAME_QK:
        return None, None
    return None, (f"llama.cpp's order of the Q/K elements of a {model_type} head is not known to qcheck: the KV "
                  "emulation blocks them in transformers' order")


def _k_rotation_order(head_dim: int) -> int:
    """llama.cpp's K rotation order: the largest power of two (from 64) dividing the head size
    (src/llama-kv-cache.cpp:1450-1465)."""
    n = 64
    while head_dim % (n * 2) == 0:
        n *= 2
    return n


@dataclass
class Applied:
    """An emulation attached to a model; ``remove()`` restores the model's own attention."""

    model: Any
    previous: str
    modules: list[Any]
    calls: list[int]
    notes: list[str]

    def remove(self) -> None:
        for module in self.modules:
            if hasattr(module, "_qcheck_kv"):
                del module._qcheck_kv
        self.model.set_attn_implementation(self.previous)


def apply(model: Any, emulation: KVEmulation) -> Applied:
    """Attach ``emulation`` to every attention module of ``model`` and switch it to ``emulated_attention``."""
    import torch

    _register()
    previous = model.config._attn_implementation
    layers = _attention_modules(model)
    if not layers:
        raise UsageError(f"{type(model).__name__} has no attention module qcheck can emulate a KV cache for")
    head_dim, _ = _head_dims(model)
    notes: list[str] = []
    k_rot = v_rot = None
    if emulation.engine == "llama.cpp" and head_dim:
        if emulation.k in blocks.BLOCK_SIZES and head_dim % 64 == 0:
            k_rot = blocks.hadamard(_k_rotation_order(head_dim))
        if emulation.v in blocks.BLOCK_SIZES and head_dim % 64 == 0:
            v_rot = blocks.hadamard(64)
        quantised = emulation.k in blocks.BLOCK_SIZES or emulation.v in blocks.BLOCK_SIZES
        if quantised and head_dim % 32:
            raise UsageError(f"llama.cpp cannot store a head size of {head_dim} in 32-value {emulation.label} blocks")
        if quantised and head_dim % 64:
            notes.append(f"head size {head_dim} is not a multiple of 64: llama.cpp does not Hadamard-rotate this cache")
        rotated = [side for side, rot in (("K", k_rot), ("V", v_rot)) if rot is not None]
        if rotated:
            notes.append(f"{' and '.join(rotated)} Hadamard-rotated along the head before quantisation, as llama.cpp "
                         "does (attn_rot_k/v)")
    order = None
    if emulation.engine == "llama.cpp" and head_dim and emulation.changes_anything:
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        indices, note = llama_cpp_order(getattr(cfg, "model_type", None), head_dim)
        order = None if indices is None else torch.tensor(indices, dtype=torch.long)
        if note and (emulation.k in blocks.BLOCK_SIZES or emulation.v in blocks.BLOCK_SIZES):
            notes.append(note)
    device = next(model.parameters()).device
    calls = [0]
    modules = []
    for layer, module in layers:
        module._qcheck_kv = _LayerState(
            emulation=emulation, layer=layer, calls=calls,
            k_rotation=None if k_rot is None else k_rot.to(device=device, dtype=torch.float32),
            v_rotation=None if v_rot is None else v_rot.to(device=device, dtype=torch.float32),
            order=None if order is None else order.to(device))
        modules.append(module)
    model.set_attn_implementation(ATTENTION_NAME)
    return Applied(model=model, previous=previous, modules=modules, calls=calls, notes=notes)
