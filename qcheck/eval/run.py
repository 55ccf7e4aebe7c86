"""Orchestration of ``qcheck eval``: tasks -> reference (cached) -> candidates -> metrics -> gate -> EvalResult.

Why this shape (docs/design.md "eval" data flow): the reference is computed once per (model, tasks, tokenizer,
settings) and cached on disk; each candidate is then streamed item by item against the cached rows, one
candidate loaded at a time, so N candidates cost N candidate passes and memory stays bounded by one item.
Each step is its own module: ``config`` (what is asked, validated), ``workload`` (the tokenised items),
``reference_source`` (the cached reference), ``candidates`` (each candidate scored and judged), ``report``
(the ``qcheck.eval/1`` record).

Public API (also used by ``qcheck gate``)::

    from qcheck.eval.run import EvalConfig, CandidateSpec, run_eval
    from qcheck.eval.gate import Thresholds
    result = run_eval(EvalConfig(reference="./bf16", candidates=["q4=./m.Q4_0.gguf"],
                                 thresholds=Thresholds.from_mapping({"tier": "good"})))
    result.exit_code, result.to_json()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qcheck.eval.candidates import noise_floor, run_candidate
from qcheck.eval.config import (
    NOISE_FLOOR_DTYPES,
    CandidateSpec,
    EvalConfig,
    Plan,
    default_noise_floor_dtype,
    validate,
)
from qcheck.eval.perf import Phase
from qcheck.eval.reference_source import ReferenceSide, cache_root, model_fingerprint, open_reference
from qcheck.eval.report import CandidateResult, EvalResult, performance_json
from qcheck.eval.workload import Progress, WindowSettings, Workload, load_task_set, prepare_workload

#: the progress display's former name (kept for callers that import it from here)
_Progress = Progress

__all__ = [
    "NOISE_FLOOR_DTYPES",
    "CandidateResult",
    "CandidateSpec",
    "EvalConfig",
    "EvalResult",
    "default_noise_floor_dtype",
    "model_fingerprint",
    "run_eval",
]


def _quiet_transformers(transformers: Any) -> None:
    """No weight-loading progress bars or advisory warnings from transformers on our stderr."""
    try:
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:  # pragma: no cover - very old transformers
        pass


def run_eval(config: EvalConfig, *, on_event: Callable[[str], None] | None = None) -> EvalResult:
    """Run a whole evaluation; QcheckErrors (exit 2) for bad input, otherwise an EvalResult."""
    from qcheck.eval.runners.reference import load_tokenizer, torch_modules

    plan = validate(config)
    run_phase = Phase()
    settings = WindowSettings(max_length=config.max_length, stride=config.stride, windows=config.windows,
                              max_items=config.max_items)
    tasks = load_task_set(config.tasks, settings)
    _, transformers = torch_modules()
    _quiet_transformers(transformers)
    work = prepare_workload(tasks, load_tokenizer(plan.ref_dir), settings, Progress(config.progress),
                            on_event or (lambda _msg: None))
    with cache_root(config) as home:
        ref = open_reference(config, plan, work, home)
        try:
            results, noise = _run_candidates(config, plan, work, ref)
        finally:
            ref.cache.requests_read = ref.reader.reads
            ref.reader.close()
            from qcheck.eval.runners.simulated import drop_skeleton

            drop_skeleton()
    run_phase.done()
    return EvalResult(reference=ref.report, tasks=work.to_json(), candidates=results, cache=ref.cache,
                      thresholds=config.thresholds, settings=_settings_json(config, work), notes=work.notes + ref.notes,
                      noise_floor=noise, performance=performance_json(run_phase, ref.phase, results))


def _run_candidates(config: EvalConfig, plan: Plan, work: Workload,
                    ref: ReferenceSide) -> tuple[list[CandidateResult], dict[str, Any] | None]:
    """Every candidate, one at a time, and the noise floor (first while the reference model is still loaded)."""
    results: list[CandidateResult] = []
    noise: dict[str, Any] | None = None
    if config.noise_floor and ref.kept is not None:  # the reference model is still loaded: reuse it now
        work.log(f"noise floor: the reference in {config.noise_floor}")
        kept, ref.kept = ref.kept, None
        noise = noise_floor(config, work, ref, kept)
    for spec in plan.specs:
        results.append(run_candidate(spec, config, work, ref))
    if config.noise_floor and noise is None:
        from qcheck.eval.runners.simulated import drop_skeleton

        drop_skeleton()  # the last simulated candidate's model: never two models at once
        work.log(f"noise floor: the reference in {config.noise_floor}")
        noise = noise_floor(config, work, ref)
    return results, noise


def _settings_json(config: EvalConfig, work: Workload) -> dict[str, Any]:
    return {"max_length": config.max_length, "stride": work.encoder.stride, "windows": config.windows,
            "choice_metric": config.choice_metric,
            "bootstrap": config.bootstrap, "seed": config.seed, "activation_quant": config.activation_quant,
            "max_items": config.max_items, "candidate_dtype": config.reference_dtype,
            "simulate_engine": config.simulate_engine, "kv_cache": config.kv_cache.to_json(),
            "kv_cache_by_candidate": {n: kv.to_json() for n, kv in config.kv_cache_by_candidate.items()},
            "kv_split": config.kv_split}
