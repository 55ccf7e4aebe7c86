"""The candidate side of ``qcheck eval``: build each candidate's runner, stream its rows against the cached
reference, and judge the result (plausibility, gate); the noise floor is scored the same way, never gated.

Why one candidate at a time: memory is bounded by one model and one request's rows; the reference is only read
back from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from qcheck.errors import InputError
from qcheck.eval.config import CandidateSpec, EvalConfig, candidate_kv, default_noise_floor_dtype
from qcheck.eval.coverage import Coverage
from qcheck.eval.gate import Thresholds, evaluate, resolution_warnings
from qcheck.eval.generation import regressions
from qcheck.eval.metrics import CandidateMetrics
from qcheck.eval.perf import Phase
from qcheck.eval.reference_source import ReferenceSide
from qcheck.eval.report import CandidateResult, histogram
from qcheck.eval.request_plan import RequestPlan, plan_requests
from qcheck.eval.runners import DEFAULT_BACKEND, BuiltRunner, RunnerContext, build_runner
from qcheck.eval.runners.base import CandidateRunner, check_same_vocab, score_blocks
from qcheck.eval.workload import Workload
from qcheck.request import KVCacheTypes


@dataclass
class _Tally:
    """What scoring one candidate accumulates besides the metrics: skipped items, the reference's confidence."""

    acc: CandidateMetrics
    skipped: dict[str, int] = field(default_factory=lambda: {"text": 0, "choice": 0, "generate": 0})
    confidence: list[np.ndarray] = field(default_factory=list)
    #: the items and tokens the candidate was measured on
    coverage: Coverage = field(default_factory=Coverage)


def run_candidate(spec: CandidateSpec, config: EvalConfig, work: Workload, ref: ReferenceSide,
                  *, split: bool = True) -> CandidateResult:
    """Build (or take) the candidate's runner, score it against the cached reference and judge it; with a KV cache
    type (and ``config.kv_split``), also measure the weights alone and the KV cache alone (``kv_split``)."""
    phase = Phase()
    if spec.backend != DEFAULT_BACKEND or spec.runner is not None:
        from qcheck.eval.runners.simulated import drop_skeleton

        drop_skeleton()  # a kept simulated model is not needed for this one: free it first
    built = _build(spec, config, work, ref)
    if spec.runner is None:
        phase.loaded()
    runner = built.runner
    try:
        check_same_vocab(ref.vocab, runner.vocab(), spec.name)
        if hasattr(runner, "prefetch"):  # endpoint runners: all requests concurrently, resumable
            runner.prefetch(work.encoded)
        tally = _Tally(CandidateMetrics(choice_metric=config.choice_metric, n_boot=config.bootstrap, seed=config.seed))
        plan = plan_requests(runner, work, ref, tally.skipped)
        work.progress.start(f"candidate {spec.name}", work.units())
        try:
            phase.tokens = score_candidate(spec.name, runner, work, plan, tally)
        finally:
            work.progress.stop()
            plan.rows.close()
        tally.coverage = plan.coverage
        notes = built.notes
        notes.extend(getattr(runner, "notes", None) or [])
        for kind_name, count in tally.skipped.items():
            if count:
                notes.append(f"{count} {kind_name} item(s) skipped: the {runner.backend} backend cannot "
                             + ("return prompt log-probs" if kind_name != "generate" else "generate"))
        notes.extend(plan.coverage.notes())
        phase.done()
        metrics, intervals = tally.acc.summary()
        metrics.update(tally.coverage.metrics())
        phase.scored_tokens = int(metrics.get("tokens_scored") or 0)
        warning = _plausibility(spec, config, built, tally, metrics)
        kv = _kv_record(spec, config, built)  # before the runner closes: a server is asked what it stores
    finally:
        if spec.runner is None:
            runner.close()
    reported = kv is not None and kv.get("source") == "reported by the server" and kv.get("k") not in (None, "auto")
    if kv is not None and split and config.kv_split and (candidate_kv(spec, config).given or reported):
        from qcheck.eval.kv_split import Measured, kv_split

        as_run = spec if candidate_kv(spec, config).given else replace(spec, kv_cache=KVCacheTypes(kv["k"], kv["v"]))
        kv["split"] = kv_split(as_run, config, work, ref, Measured(metrics, intervals, kv.get("engine")),
                               run_candidate)
        kv_split_metrics(kv["split"], metrics, intervals)
    return _verdict(spec, config, built, (metrics, intervals), (tally, phase, warning, kv))


def _build(spec: CandidateSpec, config: EvalConfig, work: Workload, ref: ReferenceSide) -> BuiltRunner:
    if spec.runner is not None:
        return BuiltRunner(runner=spec.runner)
    work.log(f"loading candidate {spec.name}")
    device = "cuda" if config.device in ("cuda", "auto") and _cuda() else "cpu"
    context = RunnerContext(reference_path=config.reference, reference_config=ref.config,
                            reference_vocab=ref.vocab, tokenizer=work.encoder.tok, dtype=config.reference_dtype,
                            device=device, activation_quant=config.activation_quant, limits=config.limits,
                            max_length=config.max_length, simulate_engine=config.simulate_engine,
                            kv_cache=candidate_kv(spec, config), endpoint_run=ref.endpoint_run)
    return build_runner(spec.backend, spec.name, spec.path or "", context)


def _kv_record(spec: CandidateSpec, config: EvalConfig, built: BuiltRunner) -> dict[str, Any] | None:
    """What the report says about the candidate's KV cache: as its backend ran it, else as declared."""
    simulation = getattr(built, "simulation", None)
    if simulation is not None and simulation.kv_cache is not None:
        return {"engine": simulation.engine, "source": "emulated", **simulation.kv_cache}
    if built.kv_cache is not None:
        return {"engine": "llama.cpp", **built.kv_cache}
    kv = candidate_kv(spec, config)
    client, flavour = getattr(built.runner, "client", None), str(getattr(built.runner, "flavour", ""))
    reported = None
    if client is not None:
        from qcheck.eval.runners.endpoint.server_info import reported_kv_cache

        reported = reported_kv_cache(client, flavour)
    if not kv.given and reported is None:
        return None
    from qcheck.eval.kv_split import ENDPOINT_ENGINES

    record: dict[str, Any] = {"engine": ENDPOINT_ENGINES.get(flavour), "reported": reported}
    if kv.given:
        record.update(k=kv.k, v=kv.v, source="declared (the server's own setting)")
        declared = kv.k if kv.same else None
        if reported is not None and declared is not None and _same_kv(declared, reported) is False:
            built.notes.append(f"the server reports KV cache {reported!r}, not the declared {declared!r}: the "
                               "declared type is what the KV-alone part emulates")
    else:
        record.update(k=reported, v=reported, source="reported by the server")
    return record


def _same_kv(a: str, b: str) -> bool | None:
    """Whether two spellings name the same KV cache type (None: cannot tell)."""
    from qcheck.kvtypes import normalise_kv

    spell = {"fp8": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "float16": "f16", "fp16": "f16", "bfloat16": "bf16"}
    x, y = normalise_kv(a), normalise_kv(b)
    return spell.get(x, x) == spell.get(y, y)


def _plausibility(spec: CandidateSpec, config: EvalConfig, built: BuiltRunner, tally: _Tally,
                  metrics: dict[str, Any]) -> str | None:
    """Refuse a loss no quantisation explains (a loading error); a warning when it is extreme but uniform."""
    from qcheck.eval.plausibility import implausibility, is_unquantised, refuse, tensor_errors, uniform_error

    positions = np.concatenate(tally.confidence) if tally.confidence else np.zeros(0)
    reference_confidence = float(positions.mean()) if positions.size else None
    metrics["reference_top1_probability"] = reference_confidence
    # a quantised KV cache costs loss of its own: the weights may be unquantised and the loss still real
    unquantised = is_unquantised(built.quantization) and not candidate_kv(spec, config).given
    reasons = implausibility(metrics, reference_confidence, unquantised)
    if not reasons:
        return None
    model = getattr(built.runner, "model", None)
    errors = tensor_errors(config.reference_files or config.reference, model) \
        if model is not None and spec.backend == "simulated" \
        else []
    median = uniform_error(errors) if not unquantised else None
    if median is None:
        raise refuse(spec.name, reasons, errors[:3])
    return (f"extreme loss ({'; '.join(reasons)}), but every tensor is about equally far from the "
            f"reference (median relative RMS error {median:.3g}): this is what the format does to "
            "these weights, not a loading error")


def _verdict(spec: CandidateSpec, config: EvalConfig, built: BuiltRunner,
             summary: tuple[dict[str, Any], dict[str, Any]],
             extra: tuple[_Tally, Phase, str | None, dict[str, Any] | None]) -> CandidateResult:
    """The gate and the report record of one scored candidate."""
    metrics, intervals = summary
    tally, phase, extreme_warning, kv = extra
    notes, acc = built.notes, tally.acc
    if metrics.get("kld_kind") == "lower-bound":
        notes.append("KL divergence is the bucketed lower bound over top-k sets (docs/research/evals.md §5.7)")
    gate = evaluate(config.thresholds, metrics, intervals)
    warnings = resolution_warnings(config.thresholds, metrics, intervals)
    if extreme_warning:
        warnings.append(extreme_warning)
    flipped = [{"id": o.id, "task": o.task, "direction": "C->I" if o.ref_correct else "I->C",
                "reference": o.ref_output, "candidate": o.cand_output}
               for o in acc.items if o.ref_correct != o.cand_correct][:200]
    distribution = histogram(acc.token_arrays()["kld"]) if metrics.get("tokens_scored") else {}
    simulation = getattr(built, "simulation", None)
    from qcheck.net import redact

    return CandidateResult(name=spec.name, backend=built.runner.backend, path=redact(spec.path) if spec.path else None,
                           metrics=metrics,
                           intervals=intervals, gate=gate, notes=notes, warnings=warnings,
                           per_task=acc.per_task(), distribution=distribution, flipped=flipped,
                           quantization=built.quantization, activations=built.activations,
                           performance=phase.to_json(), coverage=tally.coverage.to_json(),
                           generation=regressions(acc.items),
                           simulation=simulation.to_json() if simulation is not None else None, kv_cache=kv,
                           by_position=acc.by_position())


def kv_split_metrics(split: dict[str, Any], metrics: dict[str, Any], intervals: dict[str, Any]) -> None:
    """The split's parts as gateable metrics: ``kv_only_kld_mean`` and ``weights_only_kld_mean`` (with intervals)."""
    for part in ("kv", "weights"):
        record = split.get(part) or {}
        if record.get("kld_mean") is None:
            continue
        metrics[f"{part}_only_kld_mean"] = record["kld_mean"]
        metrics[f"{part}_only_top1_agreement"] = record.get("top1_agreement")
        if record.get("kld_mean_interval"):
            intervals[f"{part}_only_kld_mean"] = record["kld_mean_interval"]


def score_candidate(name: str, runner: CandidateRunner, work: Workload, plan: RequestPlan, tally: _Tally) -> int:
    """Stream the candidate's rows block by block against the reference's rows for the same ids; then the items'
    own outcomes (choice, generate) in task order, so the statistics do not depend on how requests were batched.
    Returns the tokens that went through the candidate (scored requests' inputs, prompts and generations)."""
    work.progress.advance(sum(len(e.score) for e in work.encoded) - len(plan.scored))  # what is not compared
    tokens = sum(len(s.request.input_ids) - 1 for s in plan.scored)
    ll_ref, ll_cand = _score_rows(name, runner, work, plan, tally)
    return tokens + _score_items(runner, work, plan, tally, (ll_ref, ll_cand))


def _score_rows(name: str, runner: CandidateRunner, work: Workload, plan: RequestPlan,
                tally: _Tally) -> tuple[np.ndarray, np.ndarray]:
    """Token metrics of every compared request; returns the per-request log-likelihoods (reference, candidate)."""
    from qcheck.eval.metrics import compare_rows
    from qcheck.eval.plausibility import reference_top1_probability
    from qcheck.eval.runners.endpoint import present_rows

    requests = [s.request for s in plan.scored]
    ll_ref = np.zeros(len(requests))
    ll_cand = np.zeros(len(requests))
    for i, start, cand in score_blocks(runner, requests) if requests else ():
        owner, req = plan.scored[i], requests[i]
        item = owner.enc.item
        stop = start + cand.n_rows
        if stop > req.n_rows:
            raise InputError(f"candidate returned {stop} rows, the reference has {req.n_rows}",
                             where=f"candidate {name}, item {item.id}")
        rows = plan.rows.rows(req.key, start, stop)
        if owner.counts_tokens:
            ref_p, cand_p, targets_p = present_rows(rows, cand, req.targets[start:stop])
            positions = req.start + start + np.arange(cand.n_rows)  # tokens of context before each predicted one
            present = ~np.isnan(cand.target_logprobs) & ~np.isnan(np.asarray(rows.target_logprobs, dtype=np.float32))
            tally.acc.add_rows(item.doc, compare_rows(ref_p, cand_p, targets_p, f"candidate {name}, item {item.id}"),
                               positions[present])
            tally.confidence.append(reference_top1_probability(ref_p))
            # in the reference tokenizer's positions: a re-tokenised request counts its share of them
            plan.coverage.tokens += owner.enc.score[owner.index].n_rows * len(targets_p) / req.n_rows
        ll_ref[i] += float(rows.target_logprobs.astype(np.float64).sum())
        ll_cand[i] += float(cand.target_logprobs.astype(np.float64).sum())
        if stop == req.n_rows:
            work.progress.advance()
    return ll_ref, ll_cand


def _score_items(runner: CandidateRunner, work: Workload, plan: RequestPlan, tally: _Tally,
                 lls: tuple[np.ndarray, np.ndarray]) -> int:
    """Choice and generate outcomes in task order; returns the tokens the generations put through the model."""
    ll_ref, ll_cand = lls
    positions: dict[int, list[int]] = {}
    for i, s in enumerate(plan.scored):
        positions.setdefault(id(s.enc), []).append(i)
    tokens = 0
    for enc in work.encoded:
        item = enc.item
        found = positions.get(id(enc), [])
        if item.kind == "choice" and len(found) == len(enc.score):
            tally.acc.add_choice(item, ll_ref[found], ll_cand[found])
        if enc.generate is None:
            continue
        if not runner.capabilities.can_generate:
            tally.skipped["generate"] += 1
            work.progress.advance()
            continue
        ref_gen = plan.rows.main.generation(enc.generate.key)
        cand_gen = next(iter(runner.generate([enc.generate])))
        tokens += len(enc.generate.prompt_ids) + len(cand_gen.token_ids)
        cand_text = cand_gen.text if cand_gen.text is not None else work.encoder.decode(cand_gen.token_ids)
        ref_text = ref_gen.text if ref_gen.text is not None else work.encoder.decode(ref_gen.token_ids)
        tally.acc.add_generation(item, ref_gen, cand_gen, ref_text, cand_text, enc.generate.stop_ids)
        plan.coverage.items += 1
        work.progress.advance()
    return tokens


def noise_floor(config: EvalConfig, work: Workload, ref: ReferenceSide,
                loaded: tuple[Any, str] | None = None) -> dict[str, Any]:
    """The reference model itself, loaded in ``config.noise_floor`` (or ``loaded``: the reference model that
    computed the cache, cast to that dtype: the same weights, no second load), scored against the cached reference.

    Why: a KLD means little without the loss that mere precision causes on the same tasks; this row is that
    scale. It is measured with no thresholds and never changes the gate or the exit code.
    """
    from qcheck.errors import QcheckError
    from qcheck.eval.runners.reference import TransformersRunner, load_reference, vocab_info

    dtype = config.noise_floor or default_noise_floor_dtype(config.reference_dtype)
    name = f"noise floor ({dtype})"
    if loaded is not None:
        model, device = loaded
    else:
        model, _, device = load_reference(config.reference, dtype, config.device, config.max_memory,
                                          config.reference_adapter)
    runner = TransformersRunner(model, vocab_info(model, work.encoder.tok, work.encoder.add_bos), name=name,
                                device=device)
    del model
    record: dict[str, Any] = {"name": name, "dtype": dtype, "reference_dtype": config.reference_dtype,
                              "backend": runner.backend,
                              "description": f"the reference model computing in {dtype}, scored against the "
                                             f"{config.reference_dtype} reference like a candidate; not gated"}
    try:
        quiet = replace(config, thresholds=Thresholds())
        result = run_candidate(CandidateSpec(name=name, runner=runner), quiet, work, ref)
    except QcheckError as exc:  # the noise floor never fails the run: say why it is missing
        record["error"] = str(exc)
        return record
    finally:
        runner.close()
    data = result.to_json()
    for key in ("metrics", "intervals", "per_task", "distribution", "notes", "warnings", "performance", "by_position"):
        record[key] = data[key]
    return record


def _cuda() -> bool:
    from qcheck.eval.runners.reference import torch_modules

    torch, _ = torch_modules()
    return bool(torch.cuda.is_available())
