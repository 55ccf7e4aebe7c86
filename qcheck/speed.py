"""Speed estimate, labelled as one: upper bounds on decode and prefill tokens per second on a GPU.

Decode is memory-bound: every generated token (per step, for the whole batch) reads the weights it touches
(all dense weights, the active share of MoE experts) and each sequence's KV cache at the context, and no step is
faster than the engine's floor (kernel launches, graph launch, synchronisation, sampling):

    decode tokens/s  <=  batch / max(bytes per step / bandwidth, step floor)

Prefill is compute-bound: about 2 x active parameters FLOPs per prompt token, on the tensor cores of the format
the chosen kernel computes in, and no faster than the engine's floor per prefill step:

    prefill tokens/s  <=  min(TFLOPS(compute format) x 10^12 / (2 x active parameters), tokens per step / floor)

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
from qcheck.memory.records import SpeedEstimate
from qcheck.model import Inspection, Verdict

if TYPE_CHECKING:
    from qcheck.matrix.gpu_perf import GpuPerf, SpeedEngine
    from qcheck.matrix.schema import Arch
    from qcheck.memory.records import MemoryEstimate

_WEIGHT_ONLY = ("w4a16", "w8a16", "weight-only", "weight only", "marlin", "dequant")
#: GGUF tensor types llama.cpp multiplies as floats (cuBLAS / the float vector kernel), not with MMQ
_GGUF_FLOAT = {"F16": "fp16", "BF16": "bf16", "F32": "fp16"}
NO_CALIBRATION = "no published measurement calibrates {engine}'s speed: an upper bound only"
#: the engine families' names as people know them
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
    """What one decode step reads, from the GPU and from RAM, and how long that takes at their bandwidths."""

    gpu_bytes: float
    ram_bytes: float
    seconds: float
    host_gbs: float | None = None
    host_basis: str | None = None


def _decode_step(memory: MemoryEstimate, bandwidth_gbs: float, batch: int, gpu: str | None,
                 host_given: float | None) -> _DecodeStep:
    """Weights read once per step (MoE: the active experts) and each sequence's KV cache at the context; under a
    split that keeps layers in RAM (the user's -ngl/--n-cpu-moe, or the plan the engine applies when the model does
    not fit), those layers' weights and KV are read from RAM at host bandwidth, the rest from the GPU."""
    kv = batch * float(memory.kv_bytes_per_token or 0) * int(memory.context or 0)
    weights = memory.active_weight_bytes if memory.active_weight_bytes is not None else memory.weights_bytes
    plan = memory.offload
    if plan is None or not (plan.user_set or memory.fits is False) or not (plan.ram_read_bytes or plan.ram_kv_share):
        return _DecodeStep(weights + kv, 0.0, (weights + kv) / (bandwidth_gbs * 1e9))
    host_gbs, basis = host_bandwidth(gpu, host_given)
    on_gpu = plan.gpu_read_bytes + kv * (1 - plan.ram_kv_share)
    in_ram = plan.ram_read_bytes + kv * plan.ram_kv_share
    return _DecodeStep(on_gpu, in_ram, on_gpu / (bandwidth_gbs * 1e9) + in_ram / (host_gbs * 1e9), host_gbs, basis)


def _floor(engine: SpeedEngine | None, engines: dict[str, SpeedEngine]) -> SpeedEngine | None:
    """The engine's floor, else the lowest floor known (an engine without its own is at least that slow)."""
    if engine is not None or not engines:
        return engine
    return min(engines.values(), key=lambda e: e.decode_floor_ms(1))


def estimate_speed(verdict: Verdict, inspection: Inspection, memory: MemoryEstimate, perf: GpuPerf, arch: Arch,
                   speed: tuple[SpeedEngine | None, dict[str, SpeedEngine]],
                   host_bandwidth_gbs: float | None = None) -> SpeedEstimate:
    """The ``speed`` record for one verdict: ``perf`` is the GPU's ``[[perf]]`` entry, ``arch`` its architecture,
    ``speed`` the engine's ``[[speed_engine]]`` entry (None: the engine has none) and all of them."""
    own, engines = speed
    floor = _floor(own, engines)
    fmt, why = compute_format(verdict, inspection, arch.native_formats)
    batch = int(memory.batch or 1)
    layers = (inspection.shape.n_layers if inspection.shape is not None else 0) or inspection.num_layers or 1
    step = _decode_step(memory, perf.bandwidth_gbs, batch, verdict.gpu, host_bandwidth_gbs)
    step_bytes = step.gpu_bytes + step.ram_bytes
    ceiling = batch / step.seconds if step.seconds > 0 else None
    floor_ms = floor.decode_floor_ms(layers) if floor is not None else None
    decode = ceiling
    if ceiling is not None and floor_ms is not None:
        decode = min(ceiling, batch * 1000.0 / floor_ms)
    flops_key = fmt if fmt in perf.tflops else ("fp16" if fmt == "bf16" and "fp16" in perf.tflops
                                                else "bf16" if fmt == "fp16" and "bf16" in perf.tflops else None)
    tflops = perf.tflops.get(flops_key) if flops_key else None
    active_params = memory.active_parameters
    prefill = tflops * 1e12 / (2 * active_params) if tflops and active_params else None
    prefill_floor = floor.prefill_floor_ms(layers) if floor is not None else None
    if prefill is not None and prefill_floor is not None and floor is not None:
        prefill = min(prefill, floor.prefill_tokens * 1000.0 / prefill_floor)
    out = SpeedEstimate(
        label="estimate (upper bound from datasheet figures and the engine's per-step floor)",
        decode_tokens_per_s=None if decode is None else round(decode, 1),
        prefill_tokens_per_s=None if prefill is None else round(prefill),
        bytes_per_step=int(step_bytes), batch=batch, bandwidth_gbs=perf.bandwidth_gbs,
        compute_format=fmt, compute_why=why, tflops=tflops, active_parameters=active_params,
        formula="decode <= batch / max(GPU bytes per step / bandwidth + RAM bytes per step / host bandwidth, step "
                "floor); prefill <= min(TFLOPS(format) / (2 x active parameters), tokens per step / prefill step "
                "floor)",
        source=perf.source_of("bandwidth_gbs", *([flops_key] if flops_key else [])),
        calibration=own.calibration if own is not None else NO_CALIBRATION.format(engine=verdict.engine),
        floor_ms=None if floor_ms is None else round(floor_ms, 3),
        prefill_floor_ms=None if prefill_floor is None else round(prefill_floor, 3),
        decode_bound="floor" if decode is not None and ceiling is not None and decode < ceiling else "bandwidth",
        bandwidth_tokens_per_s=None if ceiling is None else round(ceiling, 1),
        ram_bytes_per_step=int(step.ram_bytes), host_bandwidth_gbs=step.host_gbs, host_bandwidth_basis=step.host_basis,
        floor_basis=floor.floor_basis if floor is not None else None,
        floor_source=(floor.floor_source if own is not None else
                      f"{verdict.engine} has no floor of its own: {FAMILY_NAMES.get(floor.formula, floor.formula)}'s, "
                      "the lowest known") if floor else None,
    )
    out.summary = _summary(out, verdict, memory, perf, step_bytes, layers, own, floor)
    return out


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def _summary(out: SpeedEstimate, verdict: Verdict, memory: MemoryEstimate, perf: GpuPerf, step_bytes: float,
             layers: int, own: SpeedEngine | None, floor: SpeedEngine | None) -> str:
    parts = []
    batch = out.batch
    if out.decode_tokens_per_s is not None:
        step = f"{step_bytes / 1e9:.2f} GB" if step_bytes >= 1e8 else f"{step_bytes / 1e6:.2f} MB"
        if out.decode_bound == "floor" and floor is not None:
            parts.append(f"decode <= {out.decode_tokens_per_s:,.0f} tok/s ({FAMILY_NAMES.get(floor.formula, floor.formula)} "
                         "per-step floor "
                         f"{out.floor_ms:g} ms{f' x batch {batch}' if batch > 1 else ''}; bandwidth alone: "
                         f"{out.bandwidth_tokens_per_s:,.0f})")
        elif out.ram_bytes_per_step and out.host_bandwidth_gbs:
            on_gpu = step_bytes - out.ram_bytes_per_step
            where = (f"{_gb(on_gpu)} on the GPU at {perf.bandwidth_gbs:g} GB/s + " if on_gpu >= 1e6 else "") + \
                f"{_gb(out.ram_bytes_per_step)} in RAM at {out.host_bandwidth_gbs:g} GB/s host bandwidth"
            parts.append(f"decode <= {out.decode_tokens_per_s:,.0f} tok/s ({where} per step"
                         f"{f' x batch {batch}' if batch > 1 else ''})")
        else:
            parts.append(f"decode <= {out.decode_tokens_per_s:,.0f} tok/s ({perf.bandwidth_gbs:g} GB/s / {step} per "
                         f"step{f' x batch {batch}' if batch > 1 else ''})")
    if out.prefill_tokens_per_s is not None and out.active_parameters and out.tflops:
        count = f"{out.active_parameters / 1e9:.2f} G" if out.active_parameters >= 1e8 else \
            f"{out.active_parameters / 1e6:.2f} M"
        compute = out.tflops * 1e12 / (2 * out.active_parameters)
        if out.prefill_tokens_per_s < round(compute) and floor is not None:
            parts.append(f"prefill <= {out.prefill_tokens_per_s:,} tok/s ({floor.prefill_tokens} tokens per "
                         f"{out.prefill_floor_ms:g} ms step floor; {out.compute_format.upper()} {out.tflops:g} TFLOPS "
                         f"alone: {compute:,.0f})")
        else:
            parts.append(f"prefill <= {out.prefill_tokens_per_s:,} tok/s ({out.compute_format.upper()} "
                         f"{out.tflops:g} TFLOPS / 2 x {count} active params)")
        best = max(perf.tflops.items(), key=lambda kv: kv[1], default=None)
        if verdict.status == "fallback" and best and best[1] > out.tflops and best[0] in ("fp8", "fp4", "int8"):
            parts.append(f"the fallback computes in {out.compute_format.upper()}: {best[0].upper()} kernels would "
                         f"allow {best[1] / out.tflops:.1f}x")
    elif out.tflops is None:
        parts.append(f"prefill: unknown (no sourced {out.compute_format.upper()} throughput for this GPU)")
    if not parts:
        return "estimate: not enough data"
    tail = ("; ceilings: " + own.calibration) if own is not None else \
        f"; ceilings, not predictions ({NO_CALIBRATION.format(engine=verdict.engine)})"
    return "estimate: " + "; ".join(parts) + tail
