"""Model shape numbers from config.json (or GGUF ``{arch}.*`` keys): layers, heads, vocabulary,
context length, experts. Spelled differently by different model families, so each has a key list."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qcheck.classify.configs import as_int, first
from qcheck.model import Inspection, TensorInfo

if TYPE_CHECKING:
    from qcheck.classify.table import TensorTable

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "max_seq_len", "seq_length",
                "n_ctx", "model_max_length")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", "n_experts")
EXPERT_USED_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k", "n_experts_per_tok",
                    "moe_k", "num_selected_experts")

_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")
#: the first ``.experts.N.`` of each line of names joined by newlines (what ``search`` finds in each name):
#: the rest of the line is consumed with the match, so a second one in the same name is never found
_FIRST_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.[^\n]*")


def fill_from_config(insp: Inspection, model: dict[str, Any]) -> None:
    """Copy the language model's numbers from its config (nested ``text_config`` already resolved)."""
    archs = model.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        insp.architecture = archs[0]
    if isinstance(model.get("model_type"), str):
        insp.model_type = model["model_type"]
    insp.context_length = as_int(first(model, *CONTEXT_KEYS))
    insp.num_layers = as_int(first(model, *LAYER_KEYS))
    insp.hidden_size = as_int(first(model, *HIDDEN_KEYS))
    insp.num_attention_heads = as_int(first(model, *HEAD_KEYS))
    insp.num_kv_heads = as_int(first(model, *KV_HEAD_KEYS))
    insp.head_dim = as_int(first(model, "head_dim"))
    insp.intermediate_size = as_int(first(model, "intermediate_size", "ffn_hidden_size", "n_inner"))
    if insp.head_dim is None and insp.hidden_size and insp.num_attention_heads:
        insp.head_dim = insp.hidden_size // insp.num_attention_heads if insp.num_attention_heads > 0 else None
    insp.vocab_size = as_int(first(model, "vocab_size", "padded_vocab_size"))
    experts = as_int(first(model, *EXPERT_KEYS))
    if experts is not None and experts > 1:
        insp.moe = True
        insp.num_experts = experts
        insp.num_experts_used = as_int(first(model, *EXPERT_USED_KEYS))


def fill_from_tensors(insp: Inspection, tensors: Mapping[str, TensorInfo], table: TensorTable | None = None) -> None:
    """MoE evidence in tensor names when the config has none: ``.experts.N.`` modules or fused
    ``experts``/``_exps`` stacks (leading dim = expert count). ``table``: the columns of ``tensors``, if built."""
    if insp.moe and insp.num_experts:
        return
    joined = table.joined() if table is not None and table.tensors is tensors else "\n".join(tensors)
    indices: set[int] = set()
    fused: int | None = None
    if joined.count("\n") == len(tensors) - 1:  # no name holds a newline: one regex pass, first match per line
        indices = {int(m) for m in set(_FIRST_EXPERT_INDEX.findall(joined))}  # few distinct: int() on those
    else:
        indices = {int(m.group(1)) for name in tensors if (m := _EXPERT_INDEX.search(name))}
    if not indices and (".experts." in joined or "_exps." in joined):
        for name, t in tensors.items():
            if (".experts." in name or "_exps." in name) and len(t.shape) >= 3:
                fused = fused or t.shape[0]
    if indices:
        insp.moe = True
        insp.num_experts = insp.num_experts or len(indices)
    elif fused:
        insp.moe = True
        insp.num_experts = insp.num_experts or fused
