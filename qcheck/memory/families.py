"""One memory model per engine family, behind one interface: where the weights go, how many KV cells a context
takes, what the engine holds beyond weights and KV cache, how much of a device it lets itself use, and (for the
llama.cpp family) how it offloads layers when one GPU is not enough.

The parameters (llama.cpp's ``n_ubatch`` and ``--fit`` margin, vLLM's ``gpu_memory_utilization`` and batch
defaults, SGLang's reserved-memory heuristic, TensorRT-LLM's ``free_gpu_memory_fraction`` ...) come from the
engine's ``[memory]`` table in ``matrices/engines/<id>.toml`` with their sources; a family only combines them.
docs/memory.md derives each formula and gives its measured or published error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from qcheck.matrix.memory_params import EngineMemory
from qcheck.memory.records import GIB, MIB, OffloadPlan, Part, Reserve
from qcheck.model import AttentionLayout, ModelShape
from qcheck.request import EngineKnobs


def pad(n: int, to: int) -> int:
    return n if to <= 1 else -(-n // to) * to


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


@dataclass(frozen=True)
class Cells:
    """KV cells one context takes: per full-attention layer and per sliding-window layer (all sequences)."""

    full: int
    window: int


@dataclass
class EngineFamily:
    """An engine family's memory model at one device: the interface every family implements."""

    mem: EngineMemory
    shape: ModelShape
    gpu_gib: float | None
    device: str  # "GPU", "RAM" or "unified"
    #: the engine settings the user gave (None fields: the engine's defaults, from ``mem``)
    knobs: EngineKnobs = field(default_factory=EngineKnobs)

    #: the ``formula`` value of ``[memory]`` this family implements
    formula: ClassVar[str] = ""

    @property
    def layout(self) -> AttentionLayout:
        return self.shape.attention

    @property
    def placement(self) -> str:
        """How several GPUs share a model: ``tensor`` (each holds a slice) or ``layer-split``."""
        return self.mem.placement

    # -- KV cache
    def cells(self, ctx: int, batch: int) -> Cells:
        """KV cells at a context and batch: a full layer caches every token, a window layer at most its window."""
        lay = self.layout
        return Cells(ctx * batch, min(ctx, lay.window or ctx) * batch if lay.window_layers else 0)

    def kv_notes(self, ctx: int) -> list[str]:
        return []

    # -- weights
    def host_weight_bytes(self, scale: float) -> int:
        """Weight bytes the engine keeps in host memory instead of on the device."""
        return 0

    # -- overhead and usable memory
    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        raise NotImplementedError

    def reserve(self, device_bytes: int | None) -> Reserve:
        """The usable share of a device: the GPU's wired limit on unified memory, else the family's own rule."""
        if device_bytes is None:
            return Reserve(None, "")
        frac = self.mem.get("wired_fraction")
        if self.device == "unified" and frac is not None:
            return Reserve(int(device_bytes * frac), f"{frac:.0%} of {device_bytes / GIB:.1f} GiB unified memory "
                                                     "(the GPU's default wired limit)")
        return self.device_reserve(device_bytes)

    def device_reserve(self, device_bytes: int) -> Reserve:
        return Reserve(device_bytes, "")

    def default_context(self, gpu_gib: float | None) -> tuple[int, str] | None:
        """The context the engine picks when none is given (None: the model's own maximum)."""
        by_vram = self.mem.bucket("default_context_by_vram", gpu_gib)
        if by_vram:
            ctx = int(by_vram[0])
            return ctx, f"context {ctx}: {self.mem.engine}'s default for a GPU of {gpu_gib:g} GiB"
        if self.mem.get("default_context"):
            ctx = int(self.mem.get("default_context"))
            return ctx, f"context {ctx}: {self.mem.engine}'s default"
        return None

    # -- offload
    def offload(self, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
        """How the engine would split the model between GPU and RAM when it does not fit (None: it does not)."""
        return None


class LlamaCppFamily(EngineFamily):
    """llama.cpp and the engines built on it (Ollama, LM Studio): padded KV cells, token embeddings in host
    memory, a compute buffer per ubatch graph, ``--fit`` margin, and layer offload (``-ngl``, ``--n-cpu-moe``)."""

    formula = "llama.cpp"

    @property
    def n_ubatch(self) -> int:
        return int(self.mem.get("n_ubatch", 512))

    def cells(self, ctx: int, batch: int) -> Cells:
        # n_ctx = pad(c x b, kv_pad); one stream per sequence of pad(n_ctx / b, kv_pad) cells (llama-context.cpp);
        # a sliding-window layer keeps pad(min(cells, n_swa + n_ubatch), kv_pad) per stream (llama-kv-cache-iswa.cpp
        # size_swa)
        lay = self.layout
        kv_pad = int(self.mem.get("kv_pad", 1))
        seq = pad(pad(ctx * batch, kv_pad) // batch, kv_pad)
        window = pad(min(seq, (lay.window or seq) + self.n_ubatch), kv_pad) * batch if lay.window_layers else 0
        return Cells(seq * batch, window)

    def kv_notes(self, ctx: int) -> list[str]:
        kv_pad = int(self.mem.get("kv_pad", 1))
        if pad(ctx, kv_pad) != ctx:
            return [f"llama.cpp pads each sequence's KV cache to a multiple of {kv_pad} cells"]
        return []

    def host_weight_bytes(self, scale: float) -> int:
        if self.device == "RAM":
            return 0
        return int((self.shape.embed_bytes if not self.shape.tied_output else 0) * scale)

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        return llamacpp_parts(self.shape, self.mem, ctx, batch)

    def device_reserve(self, device_bytes: int) -> Reserve:
        m = self.mem
        margin = int((m.get("fit_margin_mib", 0) + m.get("host_reserve_mib", 0)) * MIB)
        if not margin:
            return Reserve(device_bytes, "")
        what = []
        if m.get("fit_margin_mib"):
            what.append(f"{m.get('fit_margin_mib') / 1024:.1f} GiB --fit margin")
        if m.get("host_reserve_mib"):
            what.append(f"{m.get('host_reserve_mib'):g} MiB minimum free")
        return Reserve(device_bytes - margin, f"{device_bytes / GIB:.1f} GiB - {m.engine}'s " + " + ".join(what))

    def offload(self, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
        if self.device != "GPU":
            return None
        from qcheck.memory.offload import plan_offload

        return plan_offload(self.shape, scale, kv, over, usable)


class ServerFamily(EngineFamily):
    """vLLM: a profiling forward pass at ``max_num_batched_tokens`` / ``max_num_seqs`` sets the activation peak,
    and the whole of weights + activations + KV must fit in ``gpu_memory_utilization`` of the GPU."""

    formula = "vllm"
    what = "profiling run at max_num_batched_tokens / max_num_seqs"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        tokens, seqs = server_batch(self.mem, self.gpu_gib)
        return [activation_part(self.shape, self.mem, tokens, seqs, self.what), *fixed_parts(self.mem)]

    def device_reserve(self, device_bytes: int) -> Reserve:
        u = self.mem.get("gpu_memory_utilization", 0.9)
        return Reserve(int(device_bytes * u), f"gpu_memory_utilization {u:g} x {device_bytes / GIB:.1f} GiB")


class TensorRTFamily(ServerFamily):
    """TensorRT-LLM: a max_num_tokens forward pass, and the KV cache gets ``free_gpu_memory_fraction`` of what
    weights and activations leave."""

    formula = "tensorrt-llm"
    what = "max_num_tokens forward pass"

    def device_reserve(self, device_bytes: int) -> Reserve:
        frac = self.mem.get("kv_fraction_of_free", 0.9)
        return Reserve(device_bytes, f"{device_bytes / GIB:.1f} GiB; the KV cache gets free_gpu_memory_fraction "
                                     f"{frac:g} of what weights and activations leave", kv_scale=1 / frac)


class SGLangFamily(EngineFamily):
    """SGLang: memory outside ``mem_fraction_static`` is reserved for activations and CUDA graphs by its own
    heuristic."""

    formula = "sglang"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        reserved, why = sglang_reserved_mib(self.mem, self.gpu_gib, tp)
        return [Part("reserved", int(reserved * MIB), "source",
                     f"SGLang's reserved memory outside mem_fraction_static ({why}; activations and CUDA graphs)")]


class TransformersFamily(EngineFamily):
    """transformers: the whole prompt goes through one forward pass."""

    formula = "transformers"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        return [activation_part(self.shape, self.mem, max(1, ctx), batch,
                                "prefill of the whole prompt in one forward pass"), *fixed_parts(self.mem)]


class MLXFamily(EngineFamily):
    """mlx-lm: prefill in steps of ``prefill_step_size`` tokens."""

    formula = "mlx"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        step = int(self.mem.get("max_num_batched_tokens", 2048))
        return [activation_part(self.shape, self.mem, min(step, ctx) * batch, batch,
                                f"prefill step of {step} tokens"), *fixed_parts(self.mem)]


FAMILIES: dict[str, type[EngineFamily]] = {
    cls.formula: cls for cls in (LlamaCppFamily, ServerFamily, TensorRTFamily, SGLangFamily, TransformersFamily,
                                 MLXFamily)
}


def family_for(mem: EngineMemory, shape: ModelShape, gpu_gib: float | None, device: str,
               knobs: EngineKnobs | None = None) -> EngineFamily:
    """The memory model of an engine's ``[memory]`` table (the loader accepts only formulas listed here)."""
    return FAMILIES[mem.formula](mem, shape, gpu_gib, device, knobs or EngineKnobs())


# ------------------------------------------------------------------------------------------ llama.cpp
def llamacpp_compute_bytes(shape: ModelShape, n_ctx: int, n_ubatch: int, flash_attn: bool = True,
                           swa_kv: int | None = None) -> int:
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
    hd = shape.attention.k_dim or max(1, e // n_head)
    q, kv = n_head * hd, (shape.attention.kv_heads or n_head) * hd
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


def llamacpp_parts(shape: ModelShape, mem: EngineMemory, n_ctx: int, n_seq: int) -> list[Part]:
    """Compute and output buffers for llama.cpp-family engines at a context (tokens per sequence x n_seq)."""
    n_ubatch = int(mem.get("n_ubatch", 512))
    kv_pad = int(mem.get("kv_pad", 256))
    ctx = pad(n_ctx * n_seq, kv_pad)
    fa = bool(mem.get("flash_attn", 1))
    window = shape.attention.window if shape.attention.window_layers else None
    swa_kv = pad(window + n_ubatch, kv_pad) if window else None
    compute = llamacpp_compute_bytes(shape, ctx, n_ubatch, flash_attn=fa, swa_kv=swa_kv)
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
