"""One typed view of a GGUF file's model keys (``{arch}.block_count``, ``{arch}.attention.head_count_kv`` ...).

The classifier (model numbers in the inspection), the memory estimate (KV-cache layout) and the eval
simulation read the architecture keys through this view, so they agree on what a key means. The GGUF
reader already rejects a wrong type for the few keys llama.cpp fixes (``general.architecture``,
``{arch}.context_length``, ``block_count``, ``embedding_length``, ``vocab_size``); every other key is file
controlled too: here a string, a float, a huge array or an out-of-range number where a count belongs is
ignored (read as absent) with a warning naming the key, never a crash.

Semantics, as llama.cpp loads them (``llama_model_loader::get_key_or_arr``): a count may be one number or an
array with one number per layer (``head_count`` and ``head_count_kv`` on models that mix attention and
recurrent layers, where 0 marks a layer without attention); the view keeps the array and gives its
largest value as the scalar. ``vocab_size`` falls back to the length of ``tokenizer.ggml.tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcheck.typed import as_int

#: the largest value accepted per key kind (beyond any real model, far below what breaks arithmetic)
MAX_COUNT = 1 << 20  # layers, heads, experts
MAX_WIDTH = 1 << 24  # embedding / head widths, window sizes, ranks
MAX_TOKENS = 1 << 34  # context length, vocabulary
#: llama.cpp's LLAMA_MAX_LAYERS bounds per-layer arrays; accept a little more than today's 512
MAX_LAYER_ARRAY = 4096

# attribute -> (key under ``{arch}.``, bound, per-layer array allowed)
_FIELDS: dict[str, tuple[str, int, bool]] = {
    "context_length": ("context_length", MAX_TOKENS, False),
    "block_count": ("block_count", MAX_COUNT, False),
    "embedding_length": ("embedding_length", MAX_WIDTH, False),
    "head_count": ("attention.head_count", MAX_COUNT, True),
    "head_count_kv": ("attention.head_count_kv", MAX_COUNT, True),
    "key_length": ("attention.key_length", MAX_WIDTH, False),
    "value_length": ("attention.value_length", MAX_WIDTH, False),
    "kv_lora_rank": ("attention.kv_lora_rank", MAX_WIDTH, False),
    "rope_dimension_count": ("rope.dimension_count", MAX_WIDTH, False),
    "sliding_window": ("attention.sliding_window", MAX_TOKENS, False),
    "sliding_window_pattern": ("attention.sliding_window_pattern", MAX_COUNT, False),
    "vocab_size": ("vocab_size", MAX_TOKENS, False),
    "expert_count": ("expert_count", MAX_COUNT, False),
    "expert_used_count": ("expert_used_count", MAX_COUNT, False),
}


@dataclass(frozen=True)
class GGUFModelKeys:
    """The architecture keys of one GGUF file, typed and bounded; None = absent or unusable (see ``warnings``).

    Counts are non-negative integers (0 is kept: a consumer that needs a positive value checks); a per-layer
    array appears in ``*_per_layer`` and its largest value in the scalar field.
    """

    architecture: str | None = None
    name: str | None = None
    context_length: int | None = None
    block_count: int | None = None
    embedding_length: int | None = None
    head_count: int | None = None
    head_count_per_layer: tuple[int, ...] | None = None
    head_count_kv: int | None = None
    head_count_kv_per_layer: tuple[int, ...] | None = None
    key_length: int | None = None
    value_length: int | None = None
    kv_lora_rank: int | None = None
    rope_dimension_count: int | None = None
    sliding_window: int | None = None
    sliding_window_pattern: int | None = None
    vocab_size: int | None = None
    expert_count: int | None = None
    expert_used_count: int | None = None
    #: one line per key that was present but unusable (wrong type, out of range, a huge array)
    warnings: list[str] = field(default_factory=list)


def model_keys(metadata: dict[str, Any]) -> GGUFModelKeys:
    """Read the architecture keys of GGUF ``metadata`` (a ``Checkpoint.metadata`` from ``qcheck.readers.gguf``)."""
    arch = _string(metadata.get("general.architecture"))
    name = _string(metadata.get("general.name"))
    tokens = _array_length(metadata.get("tokenizer.ggml.tokens"))
    if arch is None:
        return GGUFModelKeys(name=name, vocab_size=tokens)
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for attr, (suffix, bound, per_layer) in _FIELDS.items():
        key = f"{arch}.{suffix}"
        if key not in metadata:
            continue
        raw = metadata[key]
        number = _count(raw, bound)
        if number is not None:
            values[attr] = number
            continue
        if per_layer and isinstance(raw, list):
            layers = _layer_array(raw, bound)
            if layers is not None:
                values[attr] = max(layers, default=0)
                values[f"{attr}_per_layer"] = layers
                continue
        expected = "an integer" + (" or a per-layer array of integers" if per_layer else "")
        warnings.append(f"GGUF key {key}: expected {expected} from 0 to {bound}, got {_describe(raw)}; ignored")
    if "vocab_size" not in values and tokens is not None:
        values["vocab_size"] = tokens
    for attr in ("head_count_per_layer", "head_count_kv_per_layer"):
        layers = values.get(attr)
        blocks = values.get("block_count")
        if layers is not None and blocks is not None and len(layers) != blocks:
            warnings.append(f"GGUF key {arch}.{_FIELDS[attr.removesuffix('_per_layer')][0]}: {len(layers)} "
                            f"per-layer values for {blocks} layers")
    return GGUFModelKeys(architecture=arch, name=name, warnings=warnings, **values)


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any, bound: int) -> int | None:
    """A GGUF integer within [0, bound] (GGUF keys are typed: a string or float here is a malformed key)."""
    return as_int(value, minimum=0, maximum=bound) if isinstance(value, int) else None


def _layer_array(values: list[Any], bound: int) -> tuple[int, ...] | None:
    if not values or len(values) > MAX_LAYER_ARRAY:
        return None
    out = tuple(_count(v, bound) for v in values)
    return None if any(v is None for v in out) else out  # type: ignore[return-value]


def _array_length(value: Any) -> int | None:
    """Element count of a metadata array, whether the reader kept it (a list) or summarised it."""
    if isinstance(value, list):
        return len(value)
    count = getattr(value, "count", None)  # readers.gguf.ArraySummary
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _describe(value: Any) -> str:
    """A short, bounded description of a bad value (never the whole of a file-controlled string or array)."""
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int):
        return f"{value}"
    if isinstance(value, float):
        return f"a float ({value:g})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r}{'...' if len(value) > 40 else ''})"
    count = _array_length(value)
    if count is not None:
        return f"an array of {count} values"
    return type(value).__name__
