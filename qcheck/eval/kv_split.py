"""What a quantised KV cache costs apart from the weights: the same candidate measured three ways.

- **both**: the candidate as given (quantised weights, the KV cache type asked for) — what users deploy;
- **weights**: the same backend and engine with the engine's default KV cache (llama.cpp f16, vLLM/SGLang the
  model's dtype): the weights' cost alone;
- **KV**: the unquantised reference's weights with the KV cache emulated as the candidate's engine stores it
  (``qcheck.eval.emulation.kv``): the cache's cost alone. It is always an emulation (an engine would need the
  unquantised model converted for it), labelled as such; llama.cpp's own q-block caches are reproduced to within
  1e-5 nats/token of llama.cpp on the test models (tests/test_eval_kv_cache.py).

The two parts are not additive (KL divergence is not), which is why all three are reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from qcheck.errors import QcheckError
from qcheck.eval.config import CandidateSpec, EvalConfig, candidate_kv
from qcheck.eval.gate import Thresholds
from qcheck.eval.reference_source import ReferenceSide
from qcheck.eval.report import CandidateResult
from qcheck.eval.workload import Workload
from qcheck.request import KVCacheTypes

#: endpoint flavours whose KV cache qcheck emulates -> the emulated engine
ENDPOINT_ENGINES = {"vllm": "vllm", "sglang": "sglang", "llama-cpp-python": "llama.cpp", "llama-server": "llama.cpp"}

Runner = Callable[..., CandidateResult]


@dataclass(frozen=True)
class Measured:
    """The candidate as given: its metrics and intervals, and the engine whose KV cache it ran."""

    metrics: dict[str, Any]
    intervals: dict[str, Any]
    engine: str | None


def part(metrics: dict[str, Any], intervals: dict[str, Any], label: str, backend: str | None = None
         ) -> dict[str, Any]:
    """The report's record of one part: mean KLD, top-1, PPL ratio with their intervals, and what computed it."""
    record: dict[str, Any] = {"label": label}
    if backend is not None:
        record["backend"] = backend
    for key in ("kld_mean", "top1_agreement", "ppl_ratio", "ln_ppl_ratio"):
        record[key] = metrics.get(key)
        if intervals.get(key):
            record[f"{key}_interval"] = intervals[key]
    record["kld_kind"] = metrics.get("kld_kind")
    record["tokens_scored"] = metrics.get("tokens_scored")
    return record


def _of(result: CandidateResult, label: str) -> dict[str, Any]:
    return part(result.metrics, result.intervals, label, result.backend)


def kv_split(spec: CandidateSpec, config: EvalConfig, work: Workload, ref: ReferenceSide, both: Measured,
             run: Runner) -> dict[str, Any]:
    """The three parts of ``spec``'s loss; ``run`` is ``qcheck.eval.candidates.run_candidate``."""
    quiet = replace(config, thresholds=Thresholds())
    kv = candidate_kv(spec, config)
    out: dict[str, Any] = {"both": part(both.metrics, both.intervals, f"quantised weights + KV cache {kv.label}")}
    if spec.backend == "endpoint":
        out["weights"] = {"label": "quantised weights, default KV cache",
                          "unavailable": "a server's KV cache cannot be changed from here: start it with its default "
                                         "KV cache and evaluate it as a second candidate"}
    else:
        work.log(f"{spec.name}: the weights alone (default KV cache)")
        weights = replace(spec, name=f"{spec.name} [weights only]", kv_cache=KVCacheTypes())
        out["weights"] = _safe(lambda: _of(run(weights, quiet, work, ref, split=False),
                                           "quantised weights, default KV cache"))
    out["kv"] = _kv_only(spec, config, work, ref, (both.engine, run))
    return out


def _safe(compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return compute()
    except QcheckError as exc:  # a part that cannot be measured is said so; the candidate's own result stands
        return {"error": str(exc)}


def _kv_only(spec: CandidateSpec, config: EvalConfig, work: Workload, ref: ReferenceSide,
             how: tuple[str | None, Runner]) -> dict[str, Any]:
    """The reference's own weights with the candidate's KV cache emulated (shared by candidates that ask the same)."""
    engine, run = how
    kv = candidate_kv(spec, config)
    label = f"reference weights + KV cache {kv.label} (emulated)"
    if engine is None or engine == "weights":
        return {"label": label, "unavailable": "no engine to emulate the KV cache of (--simulate-engine weights, or "
                                               "an endpoint of unknown flavour)"}
    if ref.report.get("endpoint"):
        return {"label": label, "unavailable": "the reference is an endpoint: no local weights to run with an "
                                               "emulated KV cache"}
    from qcheck.eval.emulation import kv as kvemu
    from qcheck.eval.emulation.scales import checkpoint_kv_scales

    try:
        scales = checkpoint_kv_scales(spec.path, config.limits) if spec.path and engine != "llama.cpp" else None
        emulation = kvemu.resolve(engine, kv.k, kv.v, scales)
    except QcheckError as exc:
        return {"label": label, "error": str(exc)}
    key = (engine, emulation.k, emulation.v, repr(emulation.scales))
    if key not in work.kv_only:
        work.log(f"the KV cache alone: {emulation.describe()}")
        work.kv_only[key] = _safe(lambda: _measure_kv_only(emulation, config, work, ref, run))
    return {**work.kv_only[key], "label": label, "emulation": emulation.describe(),
            "effects_left_out": emulation.effects_left_out()}


def _measure_kv_only(emulation: Any, config: EvalConfig, work: Workload, ref: ReferenceSide,
                     run: Runner) -> dict[str, Any]:
    from qcheck.eval.emulation import kv as kvemu
    from qcheck.eval.runners.reference import TransformersRunner, load_reference
    from qcheck.eval.runners.simulated import drop_skeleton

    drop_skeleton()  # never two models at once
    model, _, device = load_reference(config.reference, config.reference_dtype, config.device, config.max_memory,
                                      config.reference_adapter)
    applied = kvemu.apply(model, emulation)
    runner = TransformersRunner(model, ref.vocab, name=f"KV cache {emulation.label} only",
                                backend=f"emulated:{emulation.engine} kv", device=device)
    del model
    try:
        result = run(CandidateSpec(name=runner.name, runner=runner), replace(config, thresholds=Thresholds()), work,
                     ref, split=False)
    finally:
        applied.remove()
        runner.close()
    record = _of(result, "")
    if applied.notes:
        record["notes"] = applied.notes
    return record
