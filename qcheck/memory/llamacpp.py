"""llama.cpp and the engines built on it (llama-server, Ollama, LM Studio): padded KV cells in one pool or one
stream per slot, token embeddings in host memory, a compute buffer per ubatch graph, the ``--fit`` margin and
context reduction, and layer offload (``-ngl`` counted as the build counts it, ``--n-cpu-moe``).

The knobs are llama-server's (``-np``, ``-ub``, ``-b``, ``-fa``, ``--fit``, ``-ngl``, ``--n-cpu-moe``); their
defaults, and what changed between builds (the output rows the compute graph reserves, the ``-ngl`` counting, the
slot count, ``--fit``), come from the engine's ``[memory]`` table at the judged build.
"""

from __future__ import annotations

from qcheck.memory.base import Cells, EngineFamily, gib, pad
from qcheck.memory.records import GIB, MIB, OffloadPlan, Part, Reserve
from qcheck.model import ModelShape


def llamacpp_compute_bytes(shape: ModelShape, n_ctx: int, n_ubatch: int, flash_attn: bool = True,
                           swa_kv: int | None = None, out_rows: int | None = None) -> int:
    """The compute buffer llama.cpp reserves for one ubatch graph (n_ubatch tokens, ``out_rows`` of them output
    rows: all of them by default, one per slot in llama-server since b9460).

    ggml's graph allocator keeps the largest set of tensors alive at once; for decoder models that is one of
    three stages (t = min(n_ubatch, n_ctx), F32 activations, q = n_head x head_dim, kv = n_kv_heads x head_dim):

    * output: the logits and the final hidden state of the output rows, ``rows x (n_vocab + 2 n_embd) x 4``;
    * FFN: gate, up and their product, three hidden-sized tensors (residual, normed input, FFN output) and the
      attention output, ``t x (3 n_ff + 3 n_embd + q) x 4`` (at least ``8 n_embd``; MoE: n_ff = experts used x
      expert width), with the attention masks (the sliding-window cache's too) alive beside it;
    * attention: the masks (F16 ``n_kv x t x 2`` with flash attention, F32 without; a second one for the
      sliding-window layers) plus ``t x (3 n_embd + 2 q + 2 kv) x 4`` of projections, and without flash
      attention the F32 scores ``n_kv x t x n_head x 4``.

    Fitted to llama.cpp b11312's buffer log (tests/test_memory_llamacpp.py, bench/bench_memory.py), the FFN stage
    to a GPT-OSS-shaped model (2880 hidden, 64 x 64 query heads, 4 of 32 experts of 2880, attention sinks, every
    other layer a 128-token window: llama-server's 4 slots at 16384 cells log 109.39 MiB, the formula 109.38); the
    allocator sometimes cannot reuse a freed block, and then reports a little more (docs/memory.md).
    """
    t = max(1, min(n_ubatch, n_ctx))
    rows = t if out_rows is None else max(1, min(t, out_rows))
    e, vocab, n_kv = shape.hidden, shape.vocab, n_ctx
    n_head = max(1, shape.n_head or 1)
    hd = shape.attention.k_dim or max(1, e // n_head)
    q, kv = n_head * hd, (shape.attention.kv_heads or n_head) * hd
    ff = shape.n_ff or 4 * e
    if shape.n_expert and shape.n_ff_exp:
        ff = max(shape.n_ff if shape.n_ff != shape.n_ff_exp else 0, shape.n_expert_used * shape.n_ff_exp)
    elem = 2 if flash_attn else 4
    mask = n_kv * t * elem + (min(swa_kv, n_kv) * t * elem if swa_kv else 0)
    out_stage = rows * (vocab + 2 * e) * 4
    ffn_stage = t * max(3 * ff + 3 * e + q, 8 * e) * 4 + mask
    attn_stage = mask + t * (3 * e + 2 * q + 2 * kv) * 4
    if not flash_attn:
        attn_stage += n_kv * t * n_head * 4
    return int(max(out_stage, ffn_stage, attn_stage))


class LlamaCppFamily(EngineFamily):
    """llama.cpp-family engines at one build: slots, KV pool, compute buffer, ``--fit`` and layer offload."""

    formula = "llama.cpp"

    # -- settings: the user's knobs, else the build's defaults
    @property
    def n_batch(self) -> int:
        return int(self.knobs.n_batch or self.mem.get("n_batch", 2048))

    @property
    def n_ubatch(self) -> int:
        return min(int(self.knobs.n_ubatch or self.mem.get("n_ubatch", 512)), self.n_batch)

    @property
    def flash_attn(self) -> bool:
        return self.knobs.flash_attn if self.knobs.flash_attn is not None else bool(self.mem.get("flash_attn", 1))

    @property
    def slots(self) -> int:
        """Server slots (-np): the user's, else the build's default (llama-server -np auto: 4)."""
        return int(self.knobs.n_parallel or self.mem.get("n_seq", 1))

    @property
    def unified(self) -> bool:
        """One KV pool of n_ctx cells shared by every slot: llama-server's -np auto (an explicit -np splits)."""
        return self.knobs.n_parallel is None and bool(self.mem.get("kv_unified"))

    @property
    def kv_pad(self) -> int:
        return int(self.mem.get("kv_pad", 1))

    def streams(self, batch: int) -> int:
        """KV streams: one shared pool, else one per sequence (at least one per slot set with -np)."""
        if self.unified:
            return 1
        return max(batch, self.knobs.n_parallel or 1)

    def seq_max(self, batch: int) -> int:
        """llama.cpp's n_seq_max: the slots of a unified pool, else the streams."""
        return max(self.slots, batch) if self.unified else self.streams(batch)

    def fit_active(self) -> bool:
        """--fit runs: on in this build (or asked for) and not turned off, on a GPU or unified memory (Metal)."""
        return self.device.kind in ("GPU", "unified") and (self.knobs.fit if self.knobs.fit is not None
                                                           else bool(self.mem.get("fit")))

    def reserve(self) -> Reserve:
        """On unified memory llama.cpp sees the GPU's wired limit as the device; --fit keeps its margin there too."""
        base = super().reserve()
        margin = self.mem.get("fit_margin_mib")
        if self.device.kind != "unified" or base.usable_bytes is None or not margin or not self.fit_active() \
                or self.user_layers():
            return base
        return Reserve(base.usable_bytes - int(margin * MIB), f"{base.text} - {margin / 1024:.1f} GiB --fit margin")

    def user_layers(self) -> bool:
        return self.knobs.n_gpu_layers is not None or self.knobs.n_cpu_moe is not None

    @property
    def ngl_rule(self) -> str:
        return str(self.mem.get("ngl_rule", "either"))

    # -- KV cache
    def cells(self, ctx: int, batch: int) -> Cells:
        # unified: one stream of pad(ctx x batch) cells, the sliding-window cache pad(min(n_ctx, n_swa x n_seq_max +
        # n_ubatch)); split: pad(n_ctx / streams) cells per stream, each window stream pad(min(cells, n_swa +
        # n_ubatch)) (llama-context.cpp n_ctx_seq; llama-kv-cache-iswa.cpp size_swa)
        lay, kv_pad = self.layout, self.kv_pad
        streams = self.streams(batch)
        if streams == 1 and self.unified:
            full = pad(ctx * batch, kv_pad)
            window = pad(min(full, (lay.window or full) * self.seq_max(batch) + self.n_ubatch), kv_pad) \
                if lay.window_layers else 0
            return Cells(full, window)
        seq = pad(pad(ctx * streams, kv_pad) // streams, kv_pad)
        window = pad(min(seq, (lay.window or seq) + self.n_ubatch), kv_pad) * streams if lay.window_layers else 0
        return Cells(seq * streams, window)

    def kv_notes(self, ctx: int) -> list[str]:
        if pad(ctx, self.kv_pad) != ctx:
            return [f"llama.cpp pads each sequence's KV cache to a multiple of {self.kv_pad} cells"]
        return []

    def host_weight_bytes(self, scale: float) -> int:
        if self.device.kind == "RAM":
            return 0
        return int((self.shape.embed_bytes if not self.shape.tied_output else 0) * scale)

    # -- buffers
    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        n_ubatch, fa = self.n_ubatch, self.flash_attn
        # the graph attends over one stream's cells (the whole pool when unified)
        cells, streams = self.cells(ctx, batch), self.streams(batch)
        n_kv = cells.full // streams
        swa_kv = cells.window // streams if self.layout.window_layers else None
        out_rows = self.seq_max(batch) if self.mem.get("server_output_rows") else None
        compute = llamacpp_compute_bytes(self.shape, n_kv, n_ubatch, flash_attn=fa, swa_kv=swa_kv, out_rows=out_rows)
        rows_text = (f"{min(out_rows, n_ubatch)} output rows (one per slot, llama-server)" if out_rows is not None
                     else "every token an output row")
        n_seq = self.seq_max(batch)
        return [
            Part("compute buffer", compute, "formula",
                 f"one ubatch graph at n_ubatch {n_ubatch}, n_ctx {n_kv}, {rows_text}, flash attention "
                 f"{'on' if fa else 'off'}: max(output, FFN, attention stage) + mask (fitted to llama.cpp's buffer "
                 "log, docs/memory.md)"),
            Part("output buffer", n_seq * self.shape.vocab * 4, "formula",
                 f"n_seq_max {n_seq} x n_vocab {self.shape.vocab} x 4 B (llama_context output_reserve)"),
        ]

    # -- usable memory
    def device_reserve(self, total: int) -> Reserve:
        m = self.mem
        start = self.free_at_start(total)
        what = [f"{gib(total - start)} GiB " + ("in use (measured)" if self.device.free_bytes is not None
                                                else "CUDA context")] if total != start else []
        margin = 0
        if self.fit_active() and not self.user_layers() and m.get("fit_margin_mib"):
            margin += int(m.get("fit_margin_mib") * MIB)
            what.append(f"{m.get('fit_margin_mib') / 1024:.1f} GiB --fit margin")
        if m.get("host_reserve_mib"):
            margin += int(m.get("host_reserve_mib") * MIB)
            what.append(f"{m.get('host_reserve_mib'):g} MiB minimum free")
        if not what:
            return Reserve(total, "")
        return Reserve(start - margin, f"{total / GIB:.1f} GiB - " + " - ".join(what))

    def fits_context_itself(self) -> bool:
        return self.fit_active() and bool(self.mem.get("fit_min_ctx"))

    def notes(self) -> list[str]:
        pool = (f"{self.slots} slots sharing one KV pool (-np auto)" if self.unified
                else f"{self.slots} slot{'s' if self.slots > 1 else ''} (-np)")
        rows = "one output row per slot" if self.mem.get("server_output_rows") else "every ubatch token an output row"
        rule = {"output-first": "the output layer, then the last N-1 repeating layers",
                "output-last": "the last N repeating layers (the output layer only above the layer count)",
                "either": "unknown for this build (between b7347 and b7698): plans fit both countings"}[self.ngl_rule]
        fit = ("--fit on: lowers the context (not below 4096) then moves layers to the CPU, keeping 1 GiB free"
               if self.fit_active() else "--fit off" if self.device.kind == "GPU" else "")
        text = (f"{self.mem.engine}: {pool}, n_ubatch {self.n_ubatch}, flash attention "
                f"{'on' if self.flash_attn else 'off'}, {rows}; -ngl N counts {rule}" + (f"; {fit}" if fit else ""))
        mmap = ("--no-mmap: the weights kept on the CPU are read into RAM and held there (process memory, not "
                "page cache)" if self.knobs.no_mmap else "the weights kept on the CPU are memory-mapped (page cache, "
                "shared and reclaimable; --no-mmap holds them in RAM)")
        return [*super().notes(), text, mmap]

    # -- offload
    def offload(self, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
        if self.device.kind != "GPU":
            return None
        from qcheck.memory.offload import plan_offload

        return plan_offload(self.shape, scale, kv, over, usable, self.ngl_rule)

    def user_plan(self, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
        """The split the user's -ngl / --n-cpu-moe asks for, judged as this build places layers (None: not set)."""
        if self.device.kind != "GPU" or not self.user_layers():
            return None
        from qcheck.memory.offload import user_offload

        return user_offload(self.shape, scale, kv, over, usable, self.ngl_rule, self.knobs.n_gpu_layers,
                            self.knobs.n_cpu_moe)
