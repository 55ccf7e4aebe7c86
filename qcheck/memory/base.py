"""The interface every engine family implements, and the arithmetic they share.

A family is one engine's memory model at one device and version: where the weights go, how many KV cells a
context takes, what the engine holds beyond weights and KV cache (``overhead``), how much of the device it lets
itself use (``reserve``), the context it picks when none is given, and how it splits a model between GPU and RAM.
The parameters come from the engine's ``[memory]`` table at the judged version (``EngineMemory.at``), the engine
settings from the request's ``EngineKnobs`` (None: the engine's default), the device from ``DeviceMemory``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from qcheck.matrix.memory_params import EngineMemory
from qcheck.memory.device import DeviceMemory
from qcheck.memory.records import GIB, MIB, OffloadPlan, Part, Reserve
from qcheck.model import AttentionLayout, Inspection, ModelShape
from qcheck.request import EngineKnobs

#: bytes per activation element of the dtypes models compute in (quantised models compute in BF16/FP16)
ACT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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


def gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f}"


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
    device: DeviceMemory
    #: the engine settings the user gave (None fields: the engine's defaults, from ``mem``)
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    #: the tensor-parallel size asked for (1: none)
    tp: int = 1
    #: the inspection judged (its dtype and quantisation decide activation sizes and kernel layouts); None: a
    #: BF16 model of this shape
    model: Inspection | None = None

    #: the ``formula`` value of ``[memory]`` this family implements
    formula: ClassVar[str] = ""
    #: whether the engine sizes a KV pool from what is left (vLLM, SGLang, TensorRT-LLM) and logs it
    sizes_kv_pool: ClassVar[bool] = False

    @property
    def layout(self) -> AttentionLayout:
        return self.shape.attention

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element: the model's dtype (FP32 models compute in FP32, the rest in 16 bits)."""
        dtype = (self.model.dtype or "").lower() if self.model is not None else ""
        return ACT_BYTES.get(dtype, 2)

    @property
    def gpu_gib(self) -> float | None:
        return self.device.gib

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

    def kv_limit(self) -> int | None:
        """A KV pool size the user fixed (vLLM ``--kv-cache-memory-bytes``): the context's KV must fit in it."""
        return None

    # -- weights
    def host_weight_bytes(self, scale: float) -> int:
        """Weight bytes the engine keeps in host memory instead of on the device."""
        return 0

    def weights_on(self, n: int) -> int | None:
        """Weight bytes the engine holds on one of n devices when that is not the file's bytes over n (kernel
        layouts, tensors every tensor-parallel rank keeps whole); None: the stored bytes split evenly."""
        return None

    def weights_how(self, n: int) -> str:
        """How ``weights_on(n)`` differs from the file, for ``assumptions`` (empty: it does not)."""
        return ""

    # -- overhead and usable memory
    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        raise NotImplementedError

    def reserve(self) -> Reserve:
        """The usable share of a device: the GPU's wired limit on unified memory, else the family's own rule."""
        total = self.device.total_bytes
        if total is None:
            return Reserve(None, "")
        frac = self.mem.get("wired_fraction")
        if self.device.kind == "unified" and frac is not None:
            return Reserve(int(total * frac), f"{frac:.0%} of {total / GIB:.1f} GiB unified memory "
                                              "(the GPU's default wired limit)")
        return self.device_reserve(total)

    def device_reserve(self, total: int) -> Reserve:
        return Reserve(total, "")

    def context_bytes(self) -> int:
        """What the device runtime holds before the engine first reads free memory (CUDA/HIP context, NCCL and
        cuBLAS handles): in the device total, never available to the engine."""
        if self.device.kind != "GPU":
            return 0
        key = "context_mib_amd" if self.device.vendor == "amd" else (
            "context_mib_multi_gpu" if self.tp > 1 else "context_mib")
        mib = self.mem.get(key, self.mem.get("context_mib", 0))
        return int(mib * MIB)

    def free_at_start(self, total: int) -> int:
        """Free memory when the engine starts: what is free (measured with ``--gpu auto``, else the whole device)
        less the engine's own CUDA context."""
        free = self.device.free_bytes if self.device.free_bytes is not None else total
        return min(free, total) - self.context_bytes()

    def default_context(self) -> tuple[int, str] | None:
        """The context the engine picks when none is given (None: the model's own maximum)."""
        gpu = self.gpu_gib
        by_vram = self.mem.bucket("default_context_by_vram", gpu)
        if by_vram:
            ctx = int(by_vram[0])
            return ctx, f"context {ctx}: {self.mem.engine}'s default for a GPU of {gpu:.0f} GiB"
        if self.mem.get("default_context"):
            ctx = int(self.mem.get("default_context"))
            return ctx, f"context {ctx}: {self.mem.engine}'s default"
        return None

    def fits_context_itself(self) -> bool:
        """Whether the engine lowers the context to what fits when none is given (llama.cpp ``--fit``)."""
        return False

    def notes(self) -> list[str]:
        """The settings and defaults this estimate used, for ``assumptions``."""
        return [f"{self.mem.engine} {self.mem.version}: {n}" for n in self.mem.version_notes] if self.mem.version \
            else []

    # -- offload
    def offload(self, scale: float, kv: int, over: list[Part], usable: int) -> OffloadPlan | None:
        """How the engine would split the model between GPU and RAM when it does not fit (None: it does not)."""
        return None


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
    return out
