"""The shape facts memory needs, read from a checkpoint's headers once, at inspection time.

``shape_of_checkpoint`` fills ``Inspection.shape`` (a ``qcheck.model.ModelShape``): dimensions from config.json
or the GGUF keys, per-layer bytes from the tensor table (the expert and vision parts apart), and the attention
layout (GQA, MLA, sliding windows per layer, recurrent state). Memory, offload planning and speed read only
that record, so a saved ``qcheck inspect --json`` gives the same answers as the file. Every count from a file
is bounded before use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from qcheck.model import AttentionLayout, Inspection, ModelShape, TensorInfo, tensor_columns

if TYPE_CHECKING:
    from qcheck.model import Checkpoint

__all__ = ["MAX_LAYERS", "layout_from_config", "layout_from_gguf", "layout_from_inspection", "shape_from",
           "shape_of", "shape_of_checkpoint"]

#: at most this many layers are tracked per model (real models have < 200; hostile headers claim billions)
MAX_LAYERS = 4096

_GGUF_LAYER = re.compile(r"^blk\.(\d+)\.")
_ST_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
_EXPERT = re.compile(r"(_exps\.|\.experts\.|block_sparse_moe\.experts|\.mlp\.experts)")
_EMBED = re.compile(r"^(token_embd\.|(?:model\.)?(?:language_model\.)?(?:model\.)?embed_tokens\.|transformer\.wte\.)")
_OUTPUT = re.compile(r"^(output\.weight|lm_head\.|(?:model\.)?language_model\.lm_head\.)")
#: vision and audio encoders and their projectors (transformers names; GGUF keeps them in a separate mmproj file)
_VISION = re.compile(r"(?:^|\.)(?:vision_tower|vision_model|visual|vision_encoder|vision_embed_tokens|"
                     r"multi_modal_projector|mm_projector|image_newline|audio_tower|audio_encoder|"
                     r"embed_vision|embed_audio)(?:\.|$)")
#: config ``layer_types`` words for layers that attend over the whole context / over a window
_FULL_TYPES = frozenset({"full_attention", "attention", "global_attention", "global"})
_WINDOW_TYPES = frozenset({"sliding_attention", "local_attention", "sliding", "local"})


def _pos(v: Any) -> int | None:
    """A positive count through the typed boundary (``qcheck.typed``); None when absent or implausible."""
    from qcheck.typed import pos_int

    return pos_int(v, maximum=1 << 40)


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


# ------------------------------------------------------------------------------------------ attention layout
def layout_from_config(config: Mapping[str, Any]) -> AttentionLayout:
    """Attention layout from a transformers ``config.json`` (the ``text_config`` of a multimodal model if present)."""
    cfg = _text_config(config)
    lay = AttentionLayout()
    layers = _pos(_first(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    heads = _pos(_first(cfg, "num_attention_heads", "n_head"))
    hidden = _pos(_first(cfg, "hidden_size", "n_embd", "d_model"))
    kv = _pos(_first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv"))
    if kv is None and cfg.get("multi_query") is True:
        kv = 1
    lay.kv_heads = kv or heads
    head_dim = _pos(cfg.get("head_dim")) or (hidden // heads if hidden and heads else None)
    lay.k_dim = lay.v_dim = head_dim
    kv_lora, rope = _pos(cfg.get("kv_lora_rank")), _pos(cfg.get("qk_rope_head_dim"))
    if kv_lora and rope:
        lay.kv_lora_rank, lay.rope_dim, lay.mla_dim = kv_lora, rope, kv_lora + rope
        lay.notes.append(f"MLA: caches the compressed latent kv_lora_rank + qk_rope_head_dim = {lay.mla_dim} "
                         "elements per token per layer")
    if not layers:
        return lay
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    _layers_from_config(lay, cfg, layers, model_type)
    return lay


def _layers_from_config(lay: AttentionLayout, cfg: Mapping[str, Any], layers: int, model_type: str) -> None:
    """Split the layers into full-context, sliding-window and constant-state ones."""
    window = _pos(cfg.get("sliding_window"))
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        words = [t if isinstance(t, str) else "" for t in types]  # a hostile entry (list, dict, NaN) is "other"
        full = sum(1 for t in words if t in _FULL_TYPES)
        swa = sum(1 for t in words if t in _WINDOW_TYPES)
        other = layers - full - swa
        if other:
            lay.state_layers = other
            lay.notes.append(f"{other} layers without a growing KV cache (linear attention / state-space): "
                             "their constant-size state is ignored")
        lay.full_layers, lay.window_layers = full, (swa if window else 0)
        if swa and not window:
            lay.full_layers += swa
    elif window and _pos(cfg.get("sliding_window_pattern")):
        pattern = int(cfg["sliding_window_pattern"])
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


def layout_from_gguf(metadata: Mapping[str, Any]) -> AttentionLayout:
    """Attention layout from GGUF keys (``{arch}.block_count``, ``attention.head_count_kv``, ``key_length`` ...),
    read through the one GGUF view (``qcheck.readers.gguf_meta``)."""
    from qcheck.readers.gguf_meta import model_keys

    keys = model_keys(dict(metadata))
    lay = AttentionLayout()
    if keys.architecture is None:
        return lay
    layers = _pos(keys.block_count)
    hidden = _pos(keys.embedding_length)
    heads_n = _pos(keys.head_count)
    if keys.head_count_kv_per_layer is not None:
        lay.per_layer_kv_heads = list(keys.head_count_kv_per_layer)
        lay.kv_heads = keys.head_count_kv
    else:
        lay.kv_heads = _pos(keys.head_count_kv) or heads_n
    default_dim = hidden // heads_n if hidden and heads_n else None
    lay.k_dim = _pos(keys.key_length) or default_dim
    lay.v_dim = _pos(keys.value_length) or default_dim
    kv_lora, rope = _pos(keys.kv_lora_rank), _pos(keys.rope_dimension_count)
    if kv_lora and rope:
        lay.kv_lora_rank, lay.rope_dim, lay.mla_dim = kv_lora, rope, kv_lora + rope
        lay.notes.append(f"MLA: llama.cpp caches kv_lora_rank + n_rot = {lay.mla_dim} elements per token per layer")
    if not layers:
        return lay
    window = _pos(keys.sliding_window)
    pattern = _pos(keys.sliding_window_pattern)
    if window and pattern:
        lay.full_layers = layers // pattern
    elif window and keys.architecture in ("gemma2", "gpt-oss"):  # every other layer slides (set_swa_pattern(2))
        lay.full_layers = layers // 2
    elif window and keys.architecture == "gemma3":
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


def layout_from_inspection(ins: Inspection) -> AttentionLayout:
    """The layout from the Inspection's own fields, when neither config.json nor GGUF metadata is at hand."""
    lay = AttentionLayout(full_layers=ins.num_layers or 0)
    lay.kv_heads = ins.num_kv_heads or ins.num_attention_heads
    dim = ins.head_dim or (ins.hidden_size // ins.num_attention_heads
                           if ins.hidden_size and ins.num_attention_heads else None)
    lay.k_dim = lay.v_dim = dim
    return lay


# ------------------------------------------------------------------------------------------ shape
def shape_of_checkpoint(checkpoint: Checkpoint, inspection: Inspection) -> ModelShape:
    """The shape of a checkpoint: config.json (safetensors) or the GGUF keys for the layout and dimensions, the
    tensor table for the bytes."""
    config = checkpoint.configs.get("config.json") if checkpoint.container != "gguf" else None
    return shape_from(inspection, config=config if isinstance(config, dict) else None,
                      gguf_metadata=checkpoint.metadata if checkpoint.container == "gguf" else None,
                      tensors=checkpoint.tensors)


def shape_of(inspection: Inspection) -> ModelShape:
    """The Inspection's shape record, or for an inspection saved without one, what its own fields give."""
    return inspection.shape if inspection.shape is not None else shape_from(inspection)


def shape_from(inspection: Inspection, *, config: Mapping[str, Any] | None = None,
               gguf_metadata: Mapping[str, Any] | None = None,
               tensors: Mapping[str, TensorInfo] | None = None) -> ModelShape:
    """A ModelShape from whatever is at hand: config.json or GGUF keys for dimensions and layout, the tensor table
    for bytes (else the file size spread evenly over the layers)."""
    s = ModelShape(hidden=inspection.hidden_size or 0, vocab=inspection.vocab_size or 0,
                   n_head=inspection.num_attention_heads or 0, n_layers=inspection.num_layers or 0,
                   n_expert=inspection.num_experts or 0, n_expert_used=inspection.num_experts_used or 0,
                   total_bytes=int(inspection.size_bytes or 0))
    if config:
        _dims_from_config(s, _text_config(config))
        s.attention = layout_from_config(config)
    elif gguf_metadata:
        _dims_from_gguf(s, gguf_metadata)
        s.attention = layout_from_gguf(gguf_metadata)
    else:
        s.attention = layout_from_inspection(inspection)
    lay = s.attention
    if lay.full_layers == 0 and lay.window_layers == 0 and lay.state_layers == 0 and inspection.num_layers:
        lay.full_layers = min(inspection.num_layers, MAX_LAYERS)
    s.n_layers = min(s.n_layers, MAX_LAYERS)
    if tensors:
        _bytes_from_tensors(s, tensors)
        lay.sinks = _has_sinks(tensors)
    if not s.from_tensors and s.n_layers:
        s.layer_bytes = [s.total_bytes // s.n_layers] * s.n_layers
        s.expert_bytes = [0] * s.n_layers
    return s


def _dims_from_config(s: ModelShape, cfg: Mapping[str, Any]) -> None:
    s.hidden = s.hidden or _pos(cfg.get("hidden_size")) or 0
    s.vocab = s.vocab or _pos(cfg.get("vocab_size")) or 0
    s.n_head = s.n_head or _pos(cfg.get("num_attention_heads")) or 0
    s.n_layers = s.n_layers or _pos(cfg.get("num_hidden_layers")) or 0
    s.n_ff = _pos(cfg.get("intermediate_size")) or _pos(cfg.get("moe_intermediate_size")) or 0
    s.n_expert = (s.n_expert or _pos(cfg.get("num_local_experts")) or _pos(cfg.get("n_routed_experts"))
                  or _pos(cfg.get("num_experts")) or 0)
    s.n_expert_used = s.n_expert_used or _pos(cfg.get("num_experts_per_tok")) or 0
    s.n_ff_exp = _pos(cfg.get("moe_intermediate_size")) or 0
    s.tied_output = cfg.get("tie_word_embeddings") is True
    s.rope_scaling = _rope_scaling(cfg)


def _rope_scaling(cfg: Mapping[str, Any]) -> str | None:
    """The RoPE scaling a config declares (``rope_scaling``, or transformers 5's ``rope_parameters``), by type;
    None for none or the plain ``default`` type."""
    raw = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(raw, dict) or not raw:
        return None
    kind = raw.get("rope_type", raw.get("type"))
    if kind in (None, "default") and "factor" not in raw:
        return None
    if isinstance(kind, str) and kind.isascii() and kind.replace("_", "").isalnum() and len(kind) <= 32:
        return kind
    return "scaled"


def _dims_from_gguf(s: ModelShape, metadata: Mapping[str, Any]) -> None:
    from qcheck.readers.gguf_meta import model_keys
    from qcheck.typed import pos_ints

    keys = model_keys(dict(metadata))  # the one GGUF view; the feed-forward widths it does not carry
    s.hidden = s.hidden or _pos(keys.embedding_length) or 0
    s.n_layers = s.n_layers or _pos(keys.block_count) or 0
    s.n_head = s.n_head or _pos(keys.head_count) or 0
    s.vocab = s.vocab or _pos(keys.vocab_size) or 0
    s.n_expert = s.n_expert or _pos(keys.expert_count) or 0
    s.n_expert_used = s.n_expert_used or _pos(keys.expert_used_count) or 0
    if keys.architecture:
        ff = metadata.get(f"{keys.architecture}.feed_forward_length")
        s.n_ff = _pos(ff) or max(pos_ints(ff, 1 << 40) or [0])
        s.n_ff_exp = _pos(metadata.get(f"{keys.architecture}.expert_feed_forward_length")) or 0


def _name_bytes(tensors: Mapping[str, TensorInfo]) -> Iterable[tuple[str, int | None]]:
    """(name, bytes) of every tensor, from the columns when the table still has them (no record built)."""
    columns = tensor_columns(tensors)
    if columns is not None:
        return zip(columns.names, columns.nbytes, strict=True)
    return ((name, t.nbytes) for name, t in tensors.items())


def _has_sinks(tensors: Mapping[str, TensorInfo]) -> bool:
    """Learned attention-sink tensors: ``...self_attn.sinks`` (GPT-OSS safetensors), ``blk.N.attn_sinks.weight``
    (GGUF, llama.cpp LLM_TENSOR_ATTN_SINKS)."""
    columns = tensor_columns(tensors)
    names = columns.names if columns is not None else tensors.keys()
    return any(n.endswith((".sinks", ".attn_sinks.weight", ".attn_sinks")) for n in names)


def _bytes_from_tensors(s: ModelShape, tensors: Mapping[str, TensorInfo]) -> None:
    n = s.n_layers
    if not n:
        return
    layers = [0] * n
    experts = [0] * n
    embed = output = other = vision = 0
    for name, size in _name_bytes(tensors):
        if not isinstance(size, int) or size < 0:
            continue
        if _VISION.search(name):
            vision += size
            continue
        m = _GGUF_LAYER.match(name) or _ST_LAYER.search(name)
        if m:
            i = int(m.group(1)) if len(m.group(1)) < 7 else n
            if i < n:
                layers[i] += size
                if _EXPERT.search(name):
                    experts[i] += size
                continue
        if _EMBED.match(name):
            embed += size
        elif _OUTPUT.match(name):
            output += size
        else:
            other += size
    if not any(layers):
        return
    s.layer_bytes, s.expert_bytes = layers, experts
    s.embed_bytes, s.output_bytes, s.other_bytes, s.vision_bytes = embed, output, other, vision
    if output == 0 and embed:
        s.tied_output = True
    s.total_bytes = sum(layers) + embed + output + other + vision
    s.from_tensors = True
