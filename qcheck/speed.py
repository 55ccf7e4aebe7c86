"""Speed estimate, labelled as one: upper bounds on decode and prefill tokens per second on a GPU.

Decode is memory-bound: every generated token (per step, for the whole batch) reads the weights it touches
(all dense weights, the active share of MoE experts) and each sequence's KV cache at the context, so

    decode tokens/s  <=  batch x bandwidth / (weights read per step + batch x KV bytes at the context)

Prefill is compute-bound: about 2 x active parameters FLOPs per prompt token, on the tensor cores of the format
the chosen kernel computes in. That is where a fallback costs: a W4A16/W8A16 Marlin fallback multiplies in
BF16/FP16 although the GPU has FP8/FP4 tensor cores, so

    prefill tokens/s  <=  TFLOPS(compute format) x 10^12 / (2 x active parameters)

Bandwidth and TFLOPS are the datasheet figures in ``matrices/gpus.toml`` ``[[perf]]`` (each with its source);
no calibration factor is applied: published llama.cpp decode runs reached 48-80% of this ceiling
(``CALIBRATION``, docs/memory.md), so these are ceilings, not predictions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from qcheck.formats import REGISTRY
from qcheck.model import Inspection, Verdict

#: how far measured decode speeds stayed below the ceiling (docs/memory.md "Calibration"); stated, not applied
CALIBRATION = ("published llama.cpp decode on RTX 4090 / RTX 3090 Ti reached 48-80% of this ceiling (estimate / "
               "measured 1.25-2.09; docs/memory.md)")

if TYPE_CHECKING:
    from qcheck.matrix.gpu_perf import GpuPerf
    from qcheck.memory import MemoryEstimate

_WEIGHT_ONLY = ("w4a16", "w8a16", "weight-only", "weight only", "marlin", "dequant")


def compute_format(verdict: Verdict, inspection: Inspection, native: frozenset[str]) -> tuple[str, str]:
    """The number format the matmuls run in for this verdict, and why."""
    kernel = " ".join([verdict.kernel or "", *verdict.reasons]).lower()
    method = inspection.quantization.method
    half = "bf16" if "bf16" in native else "fp16"
    if any(w in kernel for w in _WEIGHT_ONLY):
        return half, "weight-only kernel: weights are expanded and multiplied in 16-bit"
    if method == "gguf":
        return ("int8" if "int8" in native else half), "llama.cpp quantised matmul (MMQ: int8 dot products)"
    fmt = REGISTRY.get(method)
    cores = fmt.tensor_cores if fmt is not None else None
    if cores is not None and cores in native and verdict.status == "native":
        return cores, f"native {cores.upper()} tensor cores"
    return half, "16-bit tensor cores"


@dataclass
class SpeedEstimate:
    """The JSON ``verdicts[].memory.speed``: decode and prefill ceilings and what they were computed from."""

    label: str
    decode_tokens_per_s: float | None
    prefill_tokens_per_s: int | None
    bytes_per_step: int
    batch: int
    bandwidth_gbs: float
    compute_format: str
    compute_why: str
    tflops: float | None
    active_parameters: int | None
    formula: str
    source: str
    calibration: str  # how far measured speeds stayed below such ceilings (stated, not applied)
    summary: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def estimate_speed(verdict: Verdict, inspection: Inspection, memory: MemoryEstimate, perf: GpuPerf,
                   native: frozenset[str], active_bytes: int | None, active_params: int | None) -> SpeedEstimate:
    """The ``speed`` record for one verdict; ``perf`` is the GPU's ``[[perf]]`` entry (GpuPerf)."""
    fmt, why = compute_format(verdict, inspection, native)
    batch = int(memory.batch or 1)
    per_token_kv = float(memory.kv_bytes_per_token or 0) * int(memory.context or 0)
    weights_read = active_bytes if active_bytes is not None else int(memory.weights_bytes or 0)
    step_bytes = weights_read + batch * per_token_kv
    bw = perf.bandwidth_gbs * 1e9
    decode = batch * bw / step_bytes if step_bytes else None
    flops_key = fmt if fmt in perf.tflops else ("fp16" if fmt == "bf16" and "fp16" in perf.tflops
                                                else "bf16" if fmt == "fp16" and "bf16" in perf.tflops else None)
    tflops = perf.tflops.get(flops_key) if flops_key else None
    prefill = tflops * 1e12 / (2 * active_params) if tflops and active_params else None
    best = max(perf.tflops.items(), key=lambda kv: kv[1], default=None)
    out = SpeedEstimate(
        label="estimate (upper bound from datasheet figures)",
        decode_tokens_per_s=None if decode is None else round(decode, 1),
        prefill_tokens_per_s=None if prefill is None else round(prefill),
        bytes_per_step=int(step_bytes), batch=batch, bandwidth_gbs=perf.bandwidth_gbs,
        compute_format=fmt, compute_why=why, tflops=tflops, active_parameters=active_params,
        formula="decode <= batch x bandwidth / (weights read + batch x KV bytes at context); "
                "prefill <= TFLOPS(format) / (2 x active parameters)",
        source=perf.source_of("bandwidth_gbs", *([flops_key] if flops_key else [])),
        calibration=CALIBRATION,
    )
    parts = []
    if decode is not None:
        step = f"{step_bytes / 1e9:.2f} GB" if step_bytes >= 1e8 else f"{step_bytes / 1e6:.2f} MB"
        parts.append(f"decode <= {decode:,.0f} tok/s ({perf.bandwidth_gbs:g} GB/s / {step} per "
                     f"step{f' x batch {batch}' if batch > 1 else ''})")
    if prefill is not None and active_params and tflops:
        count = f"{active_params / 1e9:.2f} G" if active_params >= 1e8 else f"{active_params / 1e6:.2f} M"
        parts.append(f"prefill <= {prefill:,.0f} tok/s ({fmt.upper()} {tflops:g} TFLOPS / 2 x {count} active "
                     "params)")
        if verdict.status == "fallback" and best and best[1] > (tflops or 0) and best[0] in ("fp8", "fp4", "int8"):
            parts.append(f"the fallback computes in {fmt.upper()}: {best[0].upper()} kernels would allow "
                         f"{best[1] / tflops:.1f}x")
    elif tflops is None:
        parts.append(f"prefill: unknown (no sourced {fmt.upper()} throughput for this GPU)")
    out.summary = ("estimate: " + "; ".join(parts) + " (datasheet ceilings: measured llama.cpp decode reached "
                   "48-80% of them, docs/memory.md)" if parts else "estimate: not enough data")
    return out
