"""Per-engine memory parameters: the ``[memory]`` table of ``matrices/engines/<id>.toml``, validated.

What an engine reserves beyond weights and KV cache (llama.cpp's compute buffers and ``--fit`` margin, vLLM's
``gpu_memory_utilization``, SGLang's ``mem_fraction_static`` ...) is engine knowledge, so it lives with the
engine's data, each value with its sources; the engine families in ``qcheck/memory/families.py`` only combine them.
An engine without a ``[memory]`` table gets "overhead unknown", never another engine's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qcheck.matrix.schema import SOURCE_KEYS, SourceSpec, Where, check_keys, require_str, type_name

#: the formula families qcheck/memory/families.py implements (docs/memory.md derives each)
FORMULAS = ("llama.cpp", "vllm", "sglang", "tensorrt-llm", "transformers", "mlx")
PLACEMENTS = ("layer-split", "tensor")

#: key -> (kind, meaning); kinds: int, number, fraction (0 < x <= 1), string, buckets (list of number lists)
MEMORY_KEYS: dict[str, tuple[str, str]] = {
    "formula": ("string", "which formula family combines these parameters"),
    "placement": ("string", "how the model is spread over several GPUs: layer-split or tensor"),
    "sources": ("strings", "names from [memory.sources]"),
    "note": ("string", "free text"),
    # llama.cpp family
    "n_ubatch": ("int", "physical batch: tokens per compute-graph evaluation"),
    "n_batch": ("int", "logical batch"),
    "n_seq": ("int", "parallel sequences (slots)"),
    "kv_pad": ("int", "the KV cache size is padded to a multiple of this many tokens"),
    "flash_attn": ("int", "1 when flash attention is on by default (smaller compute buffer), 0 when off"),
    "fit_margin_mib": ("number", "memory --fit leaves free on each device"),
    "fit_min_ctx": ("int", "the smallest context --fit reduces to"),
    "default_context": ("int", "context when none is asked for (0 = the model's own)"),
    "default_context_by_vram": ("buckets", "[[below_gib, context], ...]: default context by GPU memory"),
    "host_reserve_mib": ("number", "memory the engine keeps free on a GPU before placing layers"),
    # server family
    "gpu_memory_utilization": ("fraction", "share of the whole GPU weights + activations + KV must fit in"),
    "gpu_memory_utilization_max": ("fraction", "the largest value the engine accepts"),
    "kv_fraction_of_free": ("fraction", "share of the memory left after weights and activations the KV gets"),
    "max_num_batched_tokens": ("int", "tokens of the profiling forward pass"),
    "max_num_seqs": ("int", "sequences of the profiling forward pass (logits rows)"),
    "large_gpu_gib": ("number", "from this GPU size on, the large_gpu_* batch defaults apply"),
    "large_gpu_batched_tokens": ("int", "max_num_batched_tokens on large GPUs"),
    "large_gpu_seqs": ("int", "max_num_seqs on large GPUs"),
    "activation_bytes_per_token_hidden": ("number", "live activation bytes per token per hidden unit"),
    "activation_bytes_per_token_ff": ("number", "live activation bytes per token per feed-forward unit (MoE: the "
                                                "active experts' width)"),
    "runtime_mib": ("number", "CUDA context, cuBLAS/NCCL workspaces (not allocator-visible)"),
    "cuda_graph_mib": ("number", "CUDA graph pool"),
    "reserve_buckets": ("buckets", "[[below_gib, chunked_prefill_size, cuda_graph_max_bs], ...]"),
    "reserve_base_mib": ("number", "constant part of the reserved memory"),
    "reserve_mib_per_prefill_token": ("number", "reserved MiB per chunked-prefill token"),
    "reserve_mib_per_graph_seq": ("number", "reserved MiB per CUDA-graph batch entry"),
    "reserve_mib_per_tp": ("number", "reserved MiB per tensor-parallel rank"),
    "reserve_min_mib_large": ("number", "the least reserved on GPUs above large_gpu_gib"),
    # unified memory
    "wired_fraction": ("fraction", "share of unified memory the GPU may wire by default"),
}


@dataclass(frozen=True)
class EngineMemory:
    """An engine's memory parameters (``[memory]``) and the sources they were read from."""

    engine: str
    formula: str
    placement: str
    params: dict[str, Any]
    sources: tuple[SourceSpec, ...]
    note: str | None = None
    buckets: dict[str, tuple[tuple[float, ...], ...]] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def source_text(self) -> str:
        """The sources as one line: 'ref @ version; ...'."""
        return "; ".join(f"{s.ref} @ {s.version}" for s in self.sources)

    def bucket(self, key: str, gpu_gib: float | None) -> tuple[float, ...] | None:
        """The row of a ``[[below_gib, ...]]`` table for a GPU of this size (the first whose bound is above it)."""
        rows = self.buckets.get(key)
        if not rows or gpu_gib is None:
            return None
        for row in rows:
            if gpu_gib < row[0]:
                return row[1:]
        return rows[-1][1:]


def parse_memory(raw: Any, engine_id: str, display: str) -> EngineMemory:
    """Validate an engine file's ``[memory]`` table (matrices/SCHEMA.md §2.7)."""
    ctx = Where(display, "[memory]")
    if not isinstance(raw, dict):
        ctx.fail("bad-type", f"[memory] must be a table, not {type_name(raw)}")
    raw_sources = raw.get("sources")
    body = {k: v for k, v in raw.items() if k != "sources"}
    check_keys(body, set(MEMORY_KEYS) - {"sources"}, {"formula", "placement"}, ctx)
    formula = require_str(body, "formula", ctx)
    if formula not in FORMULAS:
        ctx.fail("bad-type", f"formula {formula!r} is not one of {', '.join(FORMULAS)}")
    placement = require_str(body, "placement", ctx)
    if placement not in PLACEMENTS:
        ctx.fail("bad-type", f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    if not isinstance(raw_sources, dict) or not raw_sources:
        ctx.fail("missing-source", "[memory] needs a [memory.sources] table naming where each value was read")
    sources = []
    for name, spec in raw_sources.items():
        sctx = Where(display, f"[memory.sources] {name}")
        if not isinstance(spec, dict):
            sctx.fail("bad-type", "a source must be a table { ref = \"...\", version = \"...\" }")
        check_keys(spec, SOURCE_KEYS, {"ref", "version"}, sctx)
        sources.append(SourceSpec(name, require_str(spec, "ref", sctx), require_str(spec, "version", sctx),
                                  spec.get("note")))
    params: dict[str, Any] = {}
    buckets: dict[str, tuple[tuple[float, ...], ...]] = {}
    for key, value in body.items():
        kind = MEMORY_KEYS[key][0]
        if key in ("formula", "placement", "note"):
            continue
        if kind == "buckets":
            buckets[key] = _buckets(key, value, ctx)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            ctx.fail("bad-type", f"{key} must be a number, not {type_name(value)}")
        if kind == "int" and not isinstance(value, int):
            ctx.fail("bad-type", f"{key} must be an integer, not {value!r}")
        if value < 0 or (kind == "fraction" and not 0 < value <= 1):
            ctx.fail("bad-value", f"{key} = {value!r} is out of range"
                     + (" (0 < x <= 1)" if kind == "fraction" else " (must not be negative)"))
        params[key] = value
    note = body.get("note")
    return EngineMemory(engine=engine_id, formula=formula, placement=placement, params=params,
                        sources=tuple(sources), note=note if isinstance(note, str) else None, buckets=buckets)


def _buckets(key: str, value: Any, ctx: Where) -> tuple[tuple[float, ...], ...]:
    rows = value if isinstance(value, list) else None
    if not rows or not all(isinstance(r, list) and len(r) >= 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 for x in r)
            for r in rows):
        ctx.fail("bad-type", f"{key} must be a list of [below_gib, value, ...] number lists")
    widths = {len(r) for r in rows}
    bounds = [r[0] for r in rows]
    if len(widths) != 1 or bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
        ctx.fail("bad-value", f"{key}: rows must have the same length and strictly increasing below_gib bounds")
    return tuple(tuple(float(x) for x in r) for r in rows)
