"""The shape facts the memory formulas need, from a checkpoint's headers: dimensions and where the bytes are.

Weights are not one number for planning: llama.cpp keeps the token embeddings in host memory, offloads whole
layers (``-ngl``), and can leave MoE expert tensors on the CPU (``--n-cpu-moe``); bytes read per generated
token depend on which experts are active. So the tensor table is summarised per layer, with the expert part
apart, and the dimensions (hidden, vocabulary, feed-forward, heads, experts) are read from config.json or the
GGUF keys. Every count from a file is bounded before use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from qcheck.model import Inspection

#: at most this many layers are tracked per model (real models have < 200; hostile headers claim billions)
MAX_LAYERS = 4096

_GGUF_LAYER = re.compile(r"^blk\.(\d+)\.")
_ST_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
_EXPERT = re.compile(r"(_exps\.|\.experts\.|block_sparse_moe\.experts|\.mlp\.experts)")
_EMBED = re.compile(r"^(token_embd\.|(?:model\.)?(?:language_model\.)?(?:model\.)?embed_tokens\.|transformer\.wte\.)")
_OUTPUT = re.compile(r"^(output\.weight|lm_head\.)")


@dataclass
class ModelShape:
    """Dimensions and a per-layer byte map of one checkpoint (bytes as stored: packed when quantised)."""

    hidden: int = 0
    vocab: int = 0
    n_head: int = 0
    n_ff: int = 0
    n_layers: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0  # one expert's feed-forward width
    total_bytes: int = 0
    embed_bytes: int = 0
    output_bytes: int = 0
    tied_output: bool = False
    layer_bytes: list[int] = field(default_factory=list)  # per layer, experts included
    expert_bytes: list[int] = field(default_factory=list)  # per layer, the routed-expert tensors only
    other_bytes: int = 0  # norms and anything outside layers, embeddings and output
    from_tensors: bool = False

    @property
    def moe(self) -> bool:
        return self.n_expert > 1 and any(self.expert_bytes)

    def active_bytes_per_token(self) -> int:
        """Weight bytes one generated token reads: everything but the inactive experts (token embeddings
        are a row lookup, not read whole)."""
        body = sum(self.layer_bytes) + self.output_bytes + self.other_bytes
        if self.moe and self.n_expert_used:
            inactive = sum(self.expert_bytes) * (1 - min(self.n_expert_used, self.n_expert) / self.n_expert)
            body -= int(inactive)
        if self.tied_output:
            body += self.embed_bytes
        return max(body, 0)


def _pos(v: Any) -> int:
    """A positive count through the typed boundary (``qcheck.typed``); 0 when absent or implausible."""
    from qcheck.typed import pos_int

    return pos_int(v, maximum=1 << 40) or 0


def shape_from(inspection: Inspection, *, config: dict[str, Any] | None = None,
               gguf_metadata: dict[str, Any] | None = None, tensors: dict[str, Any] | None = None) -> ModelShape:
    """A ModelShape from whatever is at hand: config.json or GGUF keys for dimensions, the tensor table for
    bytes (else the file size spread evenly over the layers)."""
    s = ModelShape(hidden=inspection.hidden_size or 0, vocab=inspection.vocab_size or 0,
                   n_head=inspection.num_attention_heads or 0, n_layers=inspection.num_layers or 0,
                   n_expert=inspection.num_experts or 0, n_expert_used=inspection.num_experts_used or 0,
                   total_bytes=int(inspection.size_bytes or 0))
    if config:
        text = config.get("text_config")
        cfg: dict[str, Any] = text if isinstance(text, dict) else config
        s.hidden = s.hidden or _pos(cfg.get("hidden_size"))
        s.vocab = s.vocab or _pos(cfg.get("vocab_size"))
        s.n_head = s.n_head or _pos(cfg.get("num_attention_heads"))
        s.n_layers = s.n_layers or _pos(cfg.get("num_hidden_layers"))
        s.n_ff = _pos(cfg.get("intermediate_size")) or _pos(cfg.get("moe_intermediate_size"))
        s.n_expert = s.n_expert or _pos(cfg.get("num_local_experts")) or _pos(cfg.get("n_routed_experts")) \
            or _pos(cfg.get("num_experts"))
        s.n_expert_used = s.n_expert_used or _pos(cfg.get("num_experts_per_tok"))
        s.n_ff_exp = _pos(cfg.get("moe_intermediate_size"))
        s.tied_output = cfg.get("tie_word_embeddings") is True
    if gguf_metadata:
        from qcheck.readers.gguf_meta import model_keys
        from qcheck.typed import pos_ints

        keys = model_keys(gguf_metadata)  # the one GGUF view; the feed-forward widths it does not carry
        s.hidden = s.hidden or _pos(keys.embedding_length)
        s.n_layers = s.n_layers or _pos(keys.block_count)
        s.n_head = s.n_head or _pos(keys.head_count)
        s.vocab = s.vocab or _pos(keys.vocab_size)
        s.n_expert = s.n_expert or _pos(keys.expert_count)
        s.n_expert_used = s.n_expert_used or _pos(keys.expert_used_count)
        if keys.architecture:
            ff = gguf_metadata.get(f"{keys.architecture}.feed_forward_length")
            s.n_ff = _pos(ff) or max(pos_ints(ff, 1 << 40) or [0])
            s.n_ff_exp = _pos(gguf_metadata.get(f"{keys.architecture}.expert_feed_forward_length"))
    s.n_layers = min(s.n_layers, MAX_LAYERS)
    if tensors:
        _bytes_from_tensors(s, tensors)
    if not s.from_tensors and s.n_layers:
        s.layer_bytes = [s.total_bytes // s.n_layers] * s.n_layers
        s.expert_bytes = [0] * s.n_layers
    return s


def _bytes_from_tensors(s: ModelShape, tensors: dict[str, Any]) -> None:
    n = s.n_layers
    if not n:
        return
    layers = [0] * n
    experts = [0] * n
    embed = output = other = 0
    for name, t in tensors.items():
        size = getattr(t, "nbytes", None)
        if not isinstance(size, int) or size < 0:
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
    s.embed_bytes, s.output_bytes, s.other_bytes = embed, output, other
    if output == 0 and embed:
        s.tied_output = True
    s.total_bytes = sum(layers) + embed + output + other
    s.from_tensors = True
