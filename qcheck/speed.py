"""Speed estimate, labelled as one: upper bounds on decode and prefill tokens per second on a GPU.

Decode is memory-bound: every generated token (per step, for the whole batch) reads the weights it touches
(all dense weights, the active share of MoE experts) and each sequence's KV cache as it stands (every cached token
of a full-attention layer, at most the window of a sliding-window layer: ``Cells.of``, the memory estimate's rule),
and no step is faster than the engine's floor (kernel launches, graph launch, synchronisation, sampling):

    decode tokens/s  <=  batch / max(bytes per step per GPU / bandwidth, step floor)

The figure is given at the context the deployment serves (asked with ``--context``, else the engine's default), a
sequence holding that many tokens: the slowest step of a full context. Without ``--context`` a short figure
(``SHORT_CONTEXT`` tokens) is given beside it. Under tensor parallelism each GPU reads its share of the weights and
KV heads at the same time (all-reduce time not counted: a ceiling); layers kept in RAM are read at host bandwidth.

Prefill is compute-bound: about 2 x active parameters FLOPs per prompt token plus the attention over the tokens
before it (window layers: at most the window), on the tensor cores of the format the chosen kernel computes in, and
no faster than the engine's floor per prefill step:

    prefill tokens/s  <=  min(TFLOPS(compute format) x 10^12 / FLOPs per token, tokens per step / floor)

It is given for a prompt (the context asked, else the short one) when the whole model computes on the GPU: with
layers in RAM the CPU computes them, which is not modelled.

The compute format is the one the engine's kernels really use: a W4A16/W8A16 Marlin fallback multiplies in BF16/FP16
although the GPU has FP8/FP4 tensor cores; llama.cpp multiplies quantised GGUF weights with int8 MMA (MMQ) on GPUs
with int8 tensor cores and F16/BF16 GGUF weights through cuBLAS in 16-bit. Bandwidth and TFLOPS are datasheet figures
(``matrices/gpus.toml`` ``[[perf]]``); the floors and each engine's calibration (how far published runs stayed below
the ceiling, stated, never applied) are ``[[speed_engine]]`` entries. Ceilings, not predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.formats import REGISTRY
from qcheck.memory.base import Cells
from qcheck.memory.records import DecodePoint, SpeedEstimate
from qcheck.model import AttentionLayout, Inspection, Verdict

if TYPE_CHECKING:
    from qcheck.matrix.gpu_perf import GpuPerf, SpeedEngine
    from qcheck.matrix.schema import Arch
    from qcheck.memory.records import MemoryEstimate

_WEIGHT_ONLY = ("w4a16", "w8a16", "weight-only", "weight only", "marlin", "dequant")
#: GGUF tensor types llama.cpp multiplies as floats (cuBLAS / the float vector kernel), not with MMQ
_GGUF_FLOAT = {"F16": "fp16", "BF16": "bf16", "F32": "fp16"}
NO_CALIBRATION = "no published measurement calibrates {engine}'s speed: an upper bound only"
#: the engine families' names as people know them
#: the short context a decode figure is also given at when none is asked: Ollama's and LM Studio's default context
#: below 24 GiB and the capacity table's first column, a chat exchange rather than a document (docs/memory.md)
SHORT_CONTEXT = 4096
#: what a tensor-parallel ceiling leaves out
ALLREDUCE_ASSUMPTION = ("the {n} GPUs read their shares at once; the two all-reduces per layer (batch x hidden x 2 "
                        "bytes each over NVLink or PCIe) are not counted, so the ceiling is above what they allow")
FAMILY_NAMES = {"llama.cpp": "llama.cpp", "vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM",
                "mlx": "MLX", "transformers": "transformers"}


def _gguf_weight_type(inspection: Inspection) -> str | None:
    """The GGUF type most matrices are stored in (norms and biases, always F32, do not count)."""
    types = {t: n for t, n in inspection.quantization.tensor_types.items() if t != "F32"} or \
        dict(inspection.quantization.tensor_types)
    return max(types, key=lambda t: types[t]) if types else None


def compute_format(verdict: Verdict, inspection: Inspection, native: frozenset[str]) -> tuple[str, str]:
    """The number format the prefill matmuls run in for this verdict, and why."""
    kernel = " ".join([verdict.kernel or "", *verdict.reasons]).lower()
    method = inspection.quantization.method
    half = "bf16" if "bf16" in native else "fp16"
    if any(w in kernel for w in _WEIGHT_ONLY):
        return half, "weight-only kernel: weights are expanded and multiplied in 16-bit"
    if method == "gguf":
        wtype = _gguf_weight_type(inspection)
        if wtype in _GGUF_FLOAT:
            return ("bf16" if wtype == "BF16" and "bf16" in native else "fp16"), (f"{wtype} GGUF weights: llama.cpp multiplies them through cuBLAS in 16-bit for prefill "
                         "(the float vector kernel for decode), not through its int8 quantised kernels")
        if "int8" in native:
            return "int8", "llama.cpp quantised matmul (MMQ: int8 tensor-core MMA) for prefill"
        return half, ("no int8 tensor cores: llama.cpp dequantises quantised weights to FP16 for cuBLAS above 64 "
                      "tokens")
    fmt = REGISTRY.get(method)
    cores = fmt.tensor_cores if fmt is not None else None
    if cores is not None and cores in native and verdict.status == "native":
        return cores, f"native {cores.upper()} tensor cores"
    return half, "16-bit tensor cores"


#: host memory bandwidth (GB/s) for the layers llama.cpp keeps in RAM (-ngl, --n-cpu-moe, --fit): they run on the CPU,
#: which reads them at the host's memory bandwidth. Without ``--host-bandwidth`` qcheck takes the theoretical peak of
#: the memory a GPU of that class usually sits beside (docs/memory.md, "Layers in RAM"); a ceiling like the GPU's
#: datasheet bandwidth, not a measurement.
HOST_BANDWIDTH_GBS: dict[str, tuple[float, str]] = {
    "desktop": (89.6, "dual-channel DDR5-5600 (2 x 64 bit x 5600 MT/s): a desktop beside a GeForce, Radeon or Arc "
                      "card"),
    "server": (307.2, "8-channel DDR5-4800 (8 x 64 bit x 4800 MT/s): a server beside a data-center GPU"),
}
#: product id prefixes of cards that sit in desktops and workstations
_DESKTOP_PREFIXES = ("rtx-", "gtx-", "rx-", "arc-", "titan")


def host_bandwidth(gpu: str | None, given: float | None = None) -> tuple[float, str]:
    """The host memory bandwidth (GB/s) layers in RAM decode at, and where it comes from: ``--host-bandwidth``, else
    the named default of the GPU's platform (``HOST_BANDWIDTH_GBS``)."""
    if given is not None:
        return float(given), "--host-bandwidth"
    platform = "desktop" if (gpu or "").startswith(_DESKTOP_PREFIXES) else "server"
    gbs, why = HOST_BANDWIDTH_GBS[platform]
    return gbs, f"qcheck's {platform} default, {why} (--host-bandwidth sets yours)"


@dataclass(frozen=True)
class _DecodeStep:
    """What one decode step reads per GPU, from the GPU and from RAM, and how long that takes at their bandwidths."""

    gpu_bytes: float
    ram_bytes: float
    seconds: float
    kv_bytes: float
    host_gbs: float | None = None
    host_basis: str | None = None


@dataclass(frozen=True)
class _Reads:
    """What a decode step reads apart from the context: the weights (MoE: the active experts) per GPU, the share of
    each sequence's KV cache one GPU holds, the GPUs reading at once, and the layout the window rule applies to."""

    weights: float
    kv_share: float
    gpus: int
    layout: AttentionLayout | None
    #: KV bytes per cached token of one layer
    per_layer: float


def _reads(memory: MemoryEstimate, inspection: Inspection) -> _Reads:
    from qcheck.memory.estimate import kv_share

    weights = float(memory.active_weight_bytes if memory.active_weight_bytes is not None else memory.weights_bytes)
    lay = inspection.shape.attention if inspection.shape is not None else None
    layers = (lay.full_layers + lay.window_layers) if lay is not None else 0
    per_token = float(memory.kv_bytes_per_token or 0)
    per_layer = per_token / layers if layers else per_token
    n = memory.tp or 1
    if n <= 1 or memory.parallelism != "tensor" or lay is None:
        return _Reads(weights, 1.0, 1, lay if layers else None, per_layer)
    held = memory.weights_device_bytes / memory.weights_bytes if memory.weights_device_bytes and \
        memory.weights_bytes else 1 / n  # each rank's share as the engine holds it (replicated tensors whole)
    return _Reads(weights * held, kv_share(lay, n, "tensor"), n, lay, per_layer)


def kv_read_bytes(reads: _Reads, context: int) -> float:
    """KV bytes one decode step reads for one sequence holding ``context`` tokens, on one GPU."""
    if reads.layout is None:
        return reads.per_layer * context * reads.kv_share
    return reads.per_layer * Cells.of(reads.layout, context).layer_cells(reads.layout) * reads.kv_share


def _decode_step(memory: MemoryEstimate, reads: _Reads, kv: float, bandwidth_gbs: float,
                 host: tuple[str | None, float | None]) -> _DecodeStep:
    """Weights read once per step and ``kv`` (every sequence's cache, on one GPU); under a split that keeps layers in
    RAM (the user's -ngl/--n-cpu-moe, or the plan the engine applies when the model does not fit), those layers'
    weights and KV are read from RAM at host bandwidth, the rest from the GPU."""
    plan = memory.offload
    if plan is None or not (plan.user_set or memory.fits is False) or not (plan.ram_read_bytes or plan.ram_kv_share):
        return _DecodeStep(reads.weights + kv, 0.0, (reads.weights + kv) / (bandwidth_gbs * 1e9), kv)
    host_gbs, basis = host_bandwidth(*host)
    on_gpu = plan.gpu_read_bytes + kv * (1 - plan.ram_kv_share)
    in_ram = plan.ram_read_bytes + kv * plan.ram_kv_share
    return _DecodeStep(on_gpu, in_ram, on_gpu / (bandwidth_gbs * 1e9) + in_ram / (host_gbs * 1e9), kv, host_gbs,
                       basis)


def _in_ram(memory: MemoryEstimate) -> bool:
    """Whether layers run from RAM in this deployment (a split the user set, or the engine's plan when it does not
    fit)."""
    plan = memory.offload
    return plan is not None and (plan.user_set or memory.fits is False) and bool(plan.ram_read_bytes or
                                                                                 plan.ram_kv_share)


def _floor(engine: SpeedEngine | None, engines: dict[str, SpeedEngine]) -> SpeedEngine | None:
    """The engine's floor, else the lowest floor known (an engine without its own is at least that slow)."""
    if engine is not None or not engines:
        return engine
    return min(engines.values(), key=lambda e: e.decode_floor_ms(1))


def _contexts(memory: MemoryEstimate, asked: bool) -> list[tuple[int, str]]:
    """The contexts the decode figure is given at: the one asked, or (none asked) the short one and the one the
    deployment serves."""
    ctx = int(memory.context or 0)
    if asked:
        return [(ctx, "asked")]
    if 0 < SHORT_CONTEXT < ctx:
        return [(SHORT_CONTEXT, "short"), (ctx, "deployment")]
    return [(ctx, "deployment")]


def _context_basis(memory: MemoryEstimate, asked: bool) -> str:
    if asked:
        return "the context asked"
    if memory.context_lowered_from is not None:
        return f"no context asked: llama.cpp --fit lowers {memory.context_lowered_from} to it"
    if memory.model_context and memory.context == memory.model_context:
        return "no context asked: the model's own, the engine's default"
    return "no context asked: the engine's default"


def _prefill_at(memory: MemoryEstimate, inspection: Inspection, tflops: float | None, floor: SpeedEngine | None,
                layers: int, prompt: int) -> tuple[float | None, int | None, str | None]:
    """(prefill tokens/s over a ``prompt``-token prompt, the prompt, why there is none): the compute the prompt's
    tokens need, no faster than the engine's floor per step; none when layers run from RAM."""
    if _in_ram(memory):
        return None, None, ("layers in RAM: prefill computes them on the CPU (or streams them to the GPU), which is "
                            "not modelled")
    params = memory.active_parameters
    if not tflops or not params:
        return None, None, None
    prompt = max(1, prompt)
    # under tensor parallelism each GPU computes its share of every matmul at once
    gpus = memory.tp if memory.tp and memory.parallelism == "tensor" else 1
    rate = gpus * tflops * 1e12 / (2 * params + attention_flops(inspection, prompt))
    if floor is not None:
        rate = min(rate, floor.prefill_tokens * 1000.0 / floor.prefill_floor_ms(layers))
    return rate, prompt, None


def attention_flops(inspection: Inspection, prompt: int) -> float:
    """Attention FLOPs per prompt token, averaged over a prompt of ``prompt`` tokens: each token's query meets the
    keys before it (a window layer at most its window: ``Cells.of``), 2 FLOPs per multiply-add for QK and for AV
    over every head; 0 when the head layout is unknown (the figure stays an upper bound)."""
    shape = inspection.shape
    lay = shape.attention if shape is not None else None
    if shape is None or lay is None or not shape.n_head or not lay.k_dim or not lay.v_dim:
        return 0.0
    cap = Cells.of(lay, prompt)

    def mean_attended(c: int) -> float:  # positions 1..prompt each see min(position, c) keys
        return (c * (c + 1) / 2 + (prompt - c) * c) / prompt

    pairs = lay.full_layers * mean_attended(cap.full) + lay.window_layers * mean_attended(cap.window)
    return 2.0 * shape.n_head * (lay.k_dim + lay.v_dim) * pairs


def estimate_speed(verdict: Verdict, inspection: Inspection, memory: MemoryEstimate, perf: GpuPerf, arch: Arch,
                   speed: tuple[SpeedEngine | None, dict[str, SpeedEngine]],
                   host_bandwidth_gbs: float | None = None, asked_context: bool = False) -> SpeedEstimate:
    """The ``speed`` record for one verdict: ``perf`` is the GPU's ``[[perf]]`` entry, ``arch`` its architecture,
    ``speed`` the engine's ``[[speed_engine]]`` entry (None: the engine has none) and all of them; ``asked_context``:
    the deployment's context was asked (one figure at it), else a short figure is given beside it."""
    own, engines = speed
    floor = _floor(own, engines)
    fmt, why = compute_format(verdict, inspection, arch.native_formats)
    batch = int(memory.batch or 1)
    layers = (inspection.shape.n_layers if inspection.shape is not None else 0) or inspection.num_layers or 1
    reads = _reads(memory, inspection)
    floor_ms = floor.decode_floor_ms(layers) if floor is not None else None
    points: list[tuple[DecodePoint, _DecodeStep, float | None]] = []
    for ctx, basis in _contexts(memory, asked_context):
        step = _decode_step(memory, reads, batch * kv_read_bytes(reads, ctx), perf.bandwidth_gbs,
                            (verdict.gpu, host_bandwidth_gbs))
        ceiling = batch / step.seconds if step.seconds > 0 else None
        decode = min(ceiling, batch * 1000.0 / floor_ms) if ceiling is not None and floor_ms is not None else ceiling
        points.append((DecodePoint(ctx, None if decode is None else round(decode, 1),
                                   int(step.gpu_bytes + step.ram_bytes), int(step.kv_bytes), basis,
                                   int(step.ram_bytes)), step, ceiling))
    main, step, ceiling = points[-1]
    flops_key = fmt if fmt in perf.tflops else ("fp16" if fmt == "bf16" and "fp16" in perf.tflops
                                                else "bf16" if fmt == "fp16" and "bf16" in perf.tflops else None)
    tflops = perf.tflops.get(flops_key) if flops_key else None
    prompt = min(int(memory.context or SHORT_CONTEXT), SHORT_CONTEXT) if not asked_context else int(memory.context)
    prefill, prompt_tokens, prefill_note = _prefill_at(memory, inspection, tflops, floor, layers, prompt)
    prefill_floor = floor.prefill_floor_ms(layers) if floor is not None else None
    out = SpeedEstimate(
        label="estimate (upper bound from datasheet figures and the engine's per-step floor)",
        decode_tokens_per_s=main.decode_tokens_per_s,
        prefill_tokens_per_s=None if prefill is None else round(prefill),
        bytes_per_step=main.bytes_per_step, batch=batch, bandwidth_gbs=perf.bandwidth_gbs,
        compute_format=fmt, compute_why=why, tflops=tflops, active_parameters=memory.active_parameters,
        formula="decode <= batch / max(GPU bytes per step / bandwidth + RAM bytes per step / host bandwidth, step "
                "floor), bytes per step = weights read (MoE: active experts; per GPU under tensor parallelism) + "
                "each sequence's KV cache at the context (window layers: at most the window); prefill <= "
                "min(TFLOPS(format) / (2 x active parameters + attention FLOPs per prompt token), tokens per step / "
                "prefill step floor)",
        source=perf.source_of("bandwidth_gbs", *([flops_key] if flops_key else [])),
        calibration=own.calibration if own is not None else NO_CALIBRATION.format(engine=verdict.engine),
        floor_ms=None if floor_ms is None else round(floor_ms, 3),
        prefill_floor_ms=None if prefill_floor is None else round(prefill_floor, 3),
        decode_bound="floor" if main.decode_tokens_per_s is not None and ceiling is not None and
        main.decode_tokens_per_s < round(ceiling, 1) else "bandwidth",
        bandwidth_tokens_per_s=None if ceiling is None else round(ceiling, 1),
        ram_bytes_per_step=int(step.ram_bytes), host_bandwidth_gbs=step.host_gbs, host_bandwidth_basis=step.host_basis,
        floor_basis=floor.floor_basis if floor is not None else None,
        floor_source=(floor.floor_source if own is not None else
                      f"{verdict.engine} has no floor of its own: {FAMILY_NAMES.get(floor.formula, floor.formula)}'s, "
                      "the lowest known") if floor else None,
        context=main.context, context_basis=_context_basis(memory, asked_context), kv_bytes_per_step=main.kv_bytes_per_step,
        decode_at=[p for p, _, _ in points], gpus=reads.gpus,
        parallel_assumption=ALLREDUCE_ASSUMPTION.format(n=reads.gpus) if reads.gpus > 1 else None,
        prefill_prompt_tokens=prompt_tokens,
        prefill_seconds=None if prefill is None or not prompt_tokens else round(prompt_tokens / prefill, 3),
        prefill_note=prefill_note,
    )
    own_format = REGISTRY.get(inspection.quantization.method)
    out.native_format = own_format.tensor_cores if own_format is not None else None
    out.summary = _summary(out, verdict, perf, reads, own, floor)
    return out


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def _tok(n: float | None) -> str:
    return "?" if n is None else f"{n:,.0f}"


def _gbs(values: list[float]) -> str:
    """'5.15, 21.80 GB', or each with its unit when they differ in scale."""
    if all(v >= 1e8 for v in values):
        return ", ".join(f"{v / 1e9:.2f}" for v in values) + " GB"
    return ", ".join(_gb(v) for v in values)


def _decode_text(out: SpeedEstimate, perf: GpuPerf, reads: _Reads, floor: SpeedEngine | None) -> str:
    """'decode <= 196 tok/s at 4096 tokens of context, <= 46 at 131072 (...) (1008 GB/s / 5.15, 21.80 GB per step;
    KV 0.54, 17.18 GB of it)'."""
    batch = f" x batch {out.batch}" if out.batch > 1 else ""
    points, main = out.decode_at, out.decode_at[-1]
    if out.decode_bound == "floor" and floor is not None:
        return (f"decode <= {_tok(main.decode_tokens_per_s)} tok/s at {main.context} tokens of context "
                f"({FAMILY_NAMES.get(floor.formula, floor.formula)} per-step floor {out.floor_ms:g} ms{batch}; "
                f"bandwidth alone: {_tok(out.bandwidth_tokens_per_s)})")
    figures = ", ".join(f"<= {_tok(p.decode_tokens_per_s)}{' tok/s' if i == 0 else ''} at {p.context}"
                        f"{' tokens of context' if i == 0 else ''}" for i, p in enumerate(points))
    basis = f" ({out.context_basis})" if main.basis == "deployment" else ""
    if main.ram_bytes_per_step and out.host_bandwidth_gbs:
        on_gpu = main.bytes_per_step - main.ram_bytes_per_step
        where = (f"{_gb(on_gpu)} on the GPU at {perf.bandwidth_gbs:g} GB/s + " if on_gpu >= 1e6 else "") + \
            f"{_gb(main.ram_bytes_per_step)} in RAM at {out.host_bandwidth_gbs:g} GB/s host bandwidth per step"
    else:
        where = f"{perf.bandwidth_gbs:g} GB/s / {_gbs([p.bytes_per_step for p in points])} per step"
    kv = f"KV {_gbs([p.kv_bytes_per_step for p in points])} of it"
    lay = reads.layout
    if lay is not None and lay.window_layers and lay.window and main.context > lay.window:
        kv += f", {lay.window_layers} of {lay.full_layers + lay.window_layers} layers reading at most their " \
              f"{lay.window}-token window"
    tp = f"; per GPU at --tp {out.gpus}, all-reduces not counted" if out.gpus > 1 else ""
    return f"decode {figures}{basis} ({where}{batch}; {kv}{tp})"


def _prefill_text(out: SpeedEstimate, floor: SpeedEngine | None) -> str | None:
    if out.prefill_note:
        return f"prefill: not estimated ({out.prefill_note})"
    if out.prefill_tokens_per_s is None or not out.active_parameters or not out.tflops:
        return f"prefill: unknown (no sourced {out.compute_format.upper()} throughput for this GPU)" \
            if out.tflops is None else None
    count = f"{out.active_parameters / 1e9:.2f} G" if out.active_parameters >= 1e8 else \
        f"{out.active_parameters / 1e6:.2f} M"
    prompt = f" for a {out.prefill_prompt_tokens}-token prompt" if out.prefill_prompt_tokens else ""
    secs = f" (>= {out.prefill_seconds:.2g} s)" if out.prefill_seconds and out.prefill_seconds >= 0.01 else ""
    compute = out.gpus * out.tflops * 1e12 / (2 * out.active_parameters)
    if out.prefill_tokens_per_s < round(compute) and floor is not None and out.prefill_floor_ms and \
            out.prefill_tokens_per_s == round(floor.prefill_tokens * 1000.0 / out.prefill_floor_ms):
        return (f"prefill <= {out.prefill_tokens_per_s:,} tok/s{prompt} ({floor.prefill_tokens} tokens per "
                f"{out.prefill_floor_ms:g} ms step floor; {out.compute_format.upper()} {out.tflops:g} TFLOPS alone: "
                f"{compute:,.0f})")
    attention = " + attention over the prompt" if out.prefill_tokens_per_s < round(compute) else ""
    gpus = f"{out.gpus} x " if out.gpus > 1 else ""
    return (f"prefill <= {out.prefill_tokens_per_s:,} tok/s{prompt}{secs} ({gpus}{out.compute_format.upper()} "
            f"{out.tflops:g} TFLOPS / 2 x {count} active params{attention})")


def _summary(out: SpeedEstimate, verdict: Verdict, perf: GpuPerf, reads: _Reads, own: SpeedEngine | None,
             floor: SpeedEngine | None) -> str:
    parts = []
    if out.decode_tokens_per_s is not None:
        parts.append(_decode_text(out, perf, reads, floor))
    prefill = _prefill_text(out, floor)
    if prefill:
        parts.append(prefill)
    fmt, native = out.native_format, perf.tflops.get(out.native_format or "")
    if verdict.status == "fallback" and fmt and native and out.tflops and native > out.tflops and \
            out.prefill_tokens_per_s is not None:
        # what this checkpoint's own format would compute at on this GPU (an FP8 checkpoint is never offered the
        # INT8 rate: no INT8 kernel runs FP8 weights)
        parts.append(f"the fallback computes in {out.compute_format.upper()}: {fmt.upper()} kernels would "
                     f"allow {native / out.tflops:.1f}x")
    if not parts:
        return "estimate: not enough data"
    tail = ("; ceilings: " + own.calibration) if own is not None else \
        f"; ceilings, not predictions ({NO_CALIBRATION.format(engine=verdict.engine)})"
    return "estimate: " + "; ".join(parts) + tail
