"""Per-engine memory formulas: what each engine holds on a device beyond weights and KV cache, and how much of
the device it lets itself use.

The parameters (llama.cpp's ``n_ubatch`` and ``--fit`` margin, vLLM's ``gpu_memory_utilization`` and batch
defaults, SGLang's reserved-memory heuristic, TensorRT-LLM's ``free_gpu_memory_fraction`` ...) come from the
engine's ``[memory]`` table in ``matrices/engines/<id>.toml`` with their sources; this module only combines
them. docs/memory.md derives each formula and gives its measured or published error.

Every byte count is returned as a :class:`Part` that says what it is and where it comes from: ``formula``
(arithmetic on the model's shape with sourced parameters), ``source`` (an engine constant read in its code),
``estimate`` (qcheck's stated guess, no engine constant exists), or ``measured`` (fitted to real loads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from qcheck.matrix.memory_params import EngineMemory
from qcheck.model_shape import ModelShape

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class Part:
    """One memory component on one device."""

    name: str
    bytes: int
    basis: str  # formula | source | estimate | measured
    how: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reserve:
    """How much of a device's memory the engine lets itself fill, and why."""

    usable_bytes: int | None
    text: str  # for people: "24.0 GiB - llama.cpp's 1.0 GiB --fit margin"
    kv_scale: float = 1.0  # TensorRT-LLM gives the KV cache only a fraction of what is left


def pad(n: int, to: int) -> int:
    return n if to <= 1 else -(-n // to) * to


# ------------------------------------------------------------------------------------------ llama.cpp
def llamacpp_compute_bytes(shape: ModelShape, n_ctx: int, n_ubatch: int, n_kv_heads: int | None = None,
                           flash_attn: bool = True, head_dim: int | None = None, swa_kv: int | None = None) -> int:
    """The compute buffer llama.cpp reserves for one ubatch graph (n_ubatch tokens, all of them output rows).

    ggml's graph allocator keeps the largest set of tensors alive at once; for decoder models that is one of
    three stages (t = min(n_ubatch, n_ctx), F32 activations, q = n_head x head_dim, kv = n_kv_heads x head_dim):

    * output: the logits and the final hidden state, ``t x (n_vocab + 2 n_embd) x 4``;
    * FFN: gate, up and their product plus the residual stream, ``t x (3 n_ff + 4 n_embd) x 4`` (at least
      ``8 n_embd``; MoE: n_ff = experts used x expert width), with the attention mask(s) alive beside it;
    * attention: the masks (F16 ``n_kv x t x 2`` with flash attention, F32 without; a second one for the
      sliding-window layers) plus ``t x (3 n_embd + 2 q + 2 kv) x 4`` of projections, and without flash
      attention the F32 scores ``n_kv x t x n_head x 4``.

    Fitted to llama.cpp b11312's buffer log (tests/test_memory_llamacpp.py, bench/bench_memory.py); the
    allocator sometimes cannot reuse a freed block, and then reports a little more (docs/memory.md).
    """
    t = max(1, min(n_ubatch, n_ctx))
    e, vocab, n_kv = shape.hidden, shape.vocab, n_ctx
    n_head = max(1, shape.n_head or 1)
    hd = head_dim or max(1, e // n_head)
    q, kv = n_head * hd, (n_kv_heads or n_head) * hd
    ff = shape.n_ff or 4 * e
    if shape.n_expert and shape.n_ff_exp:
        ff = max(shape.n_ff if shape.n_ff != shape.n_ff_exp else 0, shape.n_expert_used * shape.n_ff_exp)
    elem = 2 if flash_attn else 4
    mask = n_kv * t * elem + (min(swa_kv, n_kv) * t * elem if swa_kv else 0)
    out_stage = t * (vocab + 2 * e) * 4
    ffn_stage = t * max(3 * ff + 4 * e, 8 * e) * 4 + mask
    attn_stage = mask + t * (3 * e + 2 * q + 2 * kv) * 4
    if not flash_attn:
        attn_stage += n_kv * t * n_head * 4
    return int(max(out_stage, ffn_stage, attn_stage))


def llamacpp_parts(shape: ModelShape, mem: EngineMemory, n_ctx: int, n_seq: int,
                   n_kv_heads: int | None = None, head_dim: int | None = None,
                   window: int | None = None) -> list[Part]:
    """Compute and output buffers for llama.cpp-family engines at a context (tokens per sequence x n_seq)."""
    n_ubatch = int(mem.get("n_ubatch", 512))
    kv_pad = int(mem.get("kv_pad", 256))
    ctx = pad(n_ctx * n_seq, kv_pad)
    fa = bool(mem.get("flash_attn", 1))
    swa_kv = pad(window + n_ubatch, kv_pad) if window else None
    compute = llamacpp_compute_bytes(shape, ctx, n_ubatch, n_kv_heads, flash_attn=fa, head_dim=head_dim,
                                     swa_kv=swa_kv)
    output = n_seq * shape.vocab * 4
    return [
        Part("compute buffer", compute, "formula",
             f"one ubatch graph at n_ubatch {n_ubatch}, n_ctx {ctx}, flash attention {'on' if fa else 'off'}: "
             "max(output, FFN, attention stage) + mask (fitted to llama.cpp's buffer log, docs/memory.md)"),
        Part("output buffer", output, "formula", f"n_seq {n_seq} x n_vocab {shape.vocab} x 4 B (llama_context "
                                                  "output_reserve)"),
    ]


# ------------------------------------------------------------------------------------------ servers
def server_batch(mem: EngineMemory, gpu_gib: float | None) -> tuple[int, int]:
    """(tokens, sequences) of the profiling forward pass for a GPU of this size."""
    tokens = int(mem.get("max_num_batched_tokens", 2048))
    seqs = int(mem.get("max_num_seqs", 256))
    large = mem.get("large_gpu_gib")
    if large is not None and gpu_gib is not None and gpu_gib >= large:
        tokens = int(mem.get("large_gpu_batched_tokens", tokens))
        seqs = int(mem.get("large_gpu_seqs", seqs))
    return tokens, seqs


def activation_part(shape: ModelShape, mem: EngineMemory, tokens: int, rows: int, what: str) -> Part:
    """The activations' peak of one forward pass: per token, bytes per hidden unit (and per feed-forward unit
    when the engine's data has that term: gate, up and their product are alive at once) plus the logits rows."""
    per = float(mem.get("activation_bytes_per_token_hidden", 24))
    per_ff = mem.get("activation_bytes_per_token_ff")
    ff = 0
    if per_ff is not None:
        ff = shape.n_ff or 4 * shape.hidden
        if shape.n_expert and shape.n_ff_exp and shape.n_expert_used:
            ff = max(shape.n_ff if shape.n_ff != shape.n_ff_exp else 0, shape.n_expert_used * shape.n_ff_exp)
    size = int(tokens * (shape.hidden * per + ff * float(per_ff or 0)) + rows * shape.vocab * 4)
    ff_text = f" + ff {ff} x {float(per_ff):g} B" if per_ff is not None else ""
    # with the feed-forward term the formula was fitted to measured runs (transformers: docs/memory.md)
    basis = "formula" if per_ff is not None else "estimate"
    return Part("activations", size, basis,
                f"{what}: {tokens} tokens x (hidden {shape.hidden} x {per:g} B{ff_text}) + {rows} logits rows x "
                f"vocab {shape.vocab} x 4 B")


def fixed_parts(mem: EngineMemory) -> list[Part]:
    out = []
    if mem.get("runtime_mib") is not None:
        out.append(Part("runtime", int(mem.get("runtime_mib") * MIB), "estimate",
                        "CUDA context, cuBLAS/NCCL workspaces (non-torch memory; qcheck's estimate)"))
    if mem.get("cuda_graph_mib") is not None:
        out.append(Part("CUDA graphs", int(mem.get("cuda_graph_mib") * MIB), "estimate",
                        "CUDA graph pool (qcheck's estimate from published engine logs)"))
    return out


def sglang_reserved_mib(mem: EngineMemory, gpu_gib: float | None, tp: int) -> tuple[float, str]:
    """SGLang's own reserved-memory heuristic (server_args._handle_gpu_memory_settings): what it leaves outside
    ``mem_fraction_static`` for activations and CUDA graphs."""
    row = mem.bucket("reserve_buckets", gpu_gib) or (4096.0, 160.0)
    chunk, graph_bs = row[0], row[1]
    reserved = (mem.get("reserve_base_mib", 512) + max(chunk, 2048) * mem.get("reserve_mib_per_prefill_token", 1.5)
                + graph_bs * mem.get("reserve_mib_per_graph_seq", 2) + tp * mem.get("reserve_mib_per_tp", 128))
    large = mem.get("large_gpu_gib")
    if large is not None and gpu_gib is not None and gpu_gib > large:
        reserved = max(reserved, mem.get("reserve_min_mib_large", 10240))
    return reserved, f"chunked_prefill_size {int(chunk)}, cuda_graph_max_bs {int(graph_bs)}"


# ------------------------------------------------------------------------------------------ dispatch
@dataclass
class EnginePlan:
    """An engine's per-device overhead at (context, batch) and its usable share of a device."""

    mem: EngineMemory
    shape: ModelShape
    gpu_gib: float | None
    device: str  # "GPU", "RAM" or "unified"
    kv_heads: int | None = None
    head_dim: int | None = None
    window: int | None = None  # sliding window, when some layers slide

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        m, s = self.mem, self.shape
        f = m.formula
        if f == "llama.cpp":
            return llamacpp_parts(s, m, ctx, batch, self.kv_heads, self.head_dim, self.window)
        if f in ("vllm", "tensorrt-llm"):
            tokens, seqs = server_batch(m, self.gpu_gib)
            what = ("profiling run at max_num_batched_tokens / max_num_seqs" if f == "vllm"
                    else "max_num_tokens forward pass")
            return [activation_part(s, m, tokens, seqs, what), *fixed_parts(m)]
        if f == "sglang":
            reserved, why = sglang_reserved_mib(m, self.gpu_gib, tp)
            return [Part("reserved", int(reserved * MIB), "source",
                         f"SGLang's reserved memory outside mem_fraction_static ({why}; activations and CUDA "
                         "graphs)")]
        if f == "transformers":
            return [activation_part(s, m, max(1, ctx), batch, "prefill of the whole prompt in one forward pass"),
                    *fixed_parts(m)]
        if f == "mlx":
            step = int(m.get("max_num_batched_tokens", 2048))
            return [activation_part(s, m, min(step, ctx) * batch, batch, f"prefill step of {step} tokens"),
                    *fixed_parts(m)]
        raise AssertionError(f)  # the loader only accepts FORMULAS

    def reserve(self, device_bytes: int | None) -> Reserve:
        m = self.mem
        if device_bytes is None:
            return Reserve(None, "")
        gib = device_bytes / GIB
        if self.device == "unified" and m.get("wired_fraction") is not None:
            frac = m.get("wired_fraction")
            return Reserve(int(device_bytes * frac), f"{frac:.0%} of {gib:.1f} GiB unified memory (the GPU's "
                                                     "default wired limit)")
        f = m.formula
        if f == "llama.cpp":
            margin = int((m.get("fit_margin_mib", 0) + m.get("host_reserve_mib", 0)) * MIB)
            if margin:
                what = []
                if m.get("fit_margin_mib"):
                    what.append(f"{m.get('fit_margin_mib') / 1024:.1f} GiB --fit margin")
                if m.get("host_reserve_mib"):
                    what.append(f"{m.get('host_reserve_mib'):g} MiB minimum free")
                return Reserve(device_bytes - margin, f"{gib:.1f} GiB - {m.engine}'s " + " + ".join(what))
            return Reserve(device_bytes, "")
        if f == "vllm":
            u = m.get("gpu_memory_utilization", 0.9)
            return Reserve(int(device_bytes * u), f"gpu_memory_utilization {u:g} x {gib:.1f} GiB")
        if f == "tensorrt-llm":
            frac = m.get("kv_fraction_of_free", 0.9)
            return Reserve(device_bytes, f"{gib:.1f} GiB; the KV cache gets free_gpu_memory_fraction {frac:g} of "
                                         "what weights and activations leave", kv_scale=1 / frac)
        return Reserve(device_bytes, "")


def search_max(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with fits(n) (fits is monotone: true up to a point); None if not even low."""
    if not fits(low):
        return None
    if fits(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else a


def isfinite(x: float) -> bool:
    return math.isfinite(x)
