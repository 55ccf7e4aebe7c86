"""One question, one answer: the pipeline every front end calls with a ``CheckRequest``.

    request -> plan (engines and GPUs resolved: usage errors before any file is read)
            -> inspect (headers only, or a saved ``qcheck inspect --json`` record; pickles refused)
            -> judge (one verdict per engine x GPU from the matrix; memory and speed from the Inspection)

``qcheck check``, ``qcheck gate``, ``qcheck hook``, the which-quant-fits table, an engine command line, a
deployment manifest and the Python API all build a ``CheckRequest`` and call ``run``, ``answer`` or (when they
already hold the Inspection) ``judge``; nothing else computes a verdict, a memory figure or a speed, so the
same question always gets the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.check import CHECK_SET_SCHEMA, EXPLORE_ORDER, CheckResult, ResultSet, load_targets
from qcheck.errors import UsageError

if TYPE_CHECKING:
    from qcheck.matrix import EngineRequest, Matrix, Target
    from qcheck.model import Inspection
    from qcheck.quant_table import QuantTable
    from qcheck.request import CheckRequest

__all__ = ["Plan", "answer", "inspect", "judge", "plan", "run"]


@dataclass(frozen=True)
class Plan:
    """A request's engines and GPUs resolved against the matrix."""

    engines: tuple[EngineRequest, ...]
    targets: tuple[Target, ...]
    #: engines implied by ``--gpu`` alone (explore mode: every engine on the GPU's vendor, what works first)
    explore: bool


def plan(request: CheckRequest, matrix: Matrix | None = None) -> Plan:
    """Resolve the request's ``--engine``/``--gpu`` values (usage errors before any file is read).

    No ``--engine`` with ``--gpu``: every engine that runs on the GPU's vendor. ``--engine`` without ``--gpu``:
    only providers (hosted, no GPU) can be judged; GPU engines need ``--gpu``.
    """
    from qcheck.matrix import load_matrix, parse_engine_spec
    from qcheck.matrix.resolve import EngineRequest

    matrix = matrix or load_matrix()
    if not request.engines and not request.gpus:
        raise UsageError("say what to check against: --engine E and/or --gpu G (e.g. --engine vllm --gpu h100); "
                         "with only --gpu every engine is checked")
    targets = [matrix.gpus.lookup(g) for g in request.gpus]
    targets = list({(t.label, t.arch.id, t.cc): t for t in targets}.values())  # repeated values: judged once
    if request.engines:
        engines = [parse_engine_spec(e, matrix) for e in request.engines]
    else:
        engines = [EngineRequest(e) for e in matrix.engines.values() if e.needs_gpu]
    engines = list({r.label: r for r in engines}.values())
    missing = [r.engine.name for r in engines if r.engine.needs_gpu and not targets]
    if missing:
        raise UsageError(f"{', '.join(missing)} {'runs' if len(missing) == 1 else 'run'} on hardware you choose: "
                         "add --gpu (a product like h100 or rtx-4090, an architecture like hopper, sm90, or cpu)")
    return Plan(tuple(engines), tuple(targets), explore=not request.engines and bool(targets))


def inspect(request: CheckRequest) -> list[Inspection]:
    """The Inspection of every model the request's target names (one, or each GGUF model with ``all_models``)."""
    return load_targets(request.target, request.limits, all_models=request.all_models)


def judge(inspection: Inspection, request: CheckRequest, matrix: Matrix | None = None,
          planned: Plan | None = None) -> CheckResult:
    """One verdict per planned (engine, GPU), each with its memory estimate and what the engine does at start-up
    when the request asks a memory question (the ``start-up`` dimension unless ``kernels_only``); engines implied by
    ``--gpu`` alone are judged only on the vendors they run on."""
    from qcheck.matrix import load_matrix
    from qcheck.matrix.verdicts import resolve

    matrix = matrix or load_matrix()
    planned = planned or plan(request, matrix)
    verdicts = resolve(matrix, inspection, list(planned.engines), list(planned.targets),
                       skip_foreign=not request.engines, deploy=request.deploy)
    if request.memory:
        from qcheck.memory import apply_memory
        from qcheck.memory.startup import apply_startup

        apply_memory(verdicts, inspection, request.deploy, matrix, request.memory_override,
                     host_bandwidth_gbs=request.host_bandwidth_gbs, warn_no_fit=not request.judges_startup)
        apply_startup(verdicts, inspection, request, matrix)
    if request.capacity:
        from qcheck.memory.capacity import add_capacity

        add_capacity(verdicts, inspection, request.deploy, matrix, (planned.engines, planned.targets),
                     request.memory_override)
    if planned.explore:
        verdicts.sort(key=lambda v: EXPLORE_ORDER.get(v.status, 4))  # stable: engine order within a status
    return CheckResult(inspection, verdicts, request=request, warnings=list(request.notes), explore=planned.explore)


def run(request: CheckRequest, matrix: Matrix | None = None) -> CheckResult | ResultSet:
    """Plan, inspect and judge: the request's one model's CheckResult, or with ``all_models`` a "check-set"
    ResultSet (one result per model)."""
    from qcheck.matrix import load_matrix

    matrix = matrix or load_matrix()
    planned = plan(request, matrix)  # usage errors first, before reading anything
    results = [judge(ins, request, matrix, planned) for ins in inspect(request)]
    if not request.all_models:
        return results[0]
    return ResultSet(request.target, results, kind="check-set", schema=CHECK_SET_SCHEMA)


def answer(request: CheckRequest, matrix: Matrix | None = None) -> CheckResult | ResultSet | QuantTable:
    """``qcheck check``'s whole answer: ``run``, or when the target holds several models and a GPU is named, the
    which-quant-fits table (every branch of a Hub repo with ``@*``, the safetensors variants in a directory's
    sub-folders, or the GGUF quants of a repo or directory), each row judged by the same ``judge``."""
    from qcheck.errors import AmbiguousTargetError
    from qcheck.matrix import load_matrix
    from qcheck.quant_table import QuantTable, branch_targets, variant_dirs
    from qcheck.readers.directory import SeveralModelsError

    matrix = matrix or load_matrix()
    branches = branch_targets(request.target, request.limits)
    variants = branches or (variant_dirs(request.target) if request.gpus else [])
    if variants:
        return _variant_table(request, variants, from_branches=bool(branches), matrix=matrix)
    try:
        return run(request, matrix)
    except (AmbiguousTargetError, SeveralModelsError):
        if not request.gpus or request.all_models:
            raise
        # several models and a GPU: which quant fits, one table (--all keeps the per-model detail)
        table = run(_tabled(request).replace(all_models=True), matrix)
        assert isinstance(table, ResultSet)
        return QuantTable.from_set(table)


def _tabled(request: CheckRequest) -> CheckRequest:
    """A which-quant-fits row's question: the memory figures are always shown; the start-up is judged when the user
    named deployment settings (else it is reported, as --kernels-only reports it: a table explores which fits)."""
    return request.replace(memory=True, kernels_only=request.kernels_only or not request.memory)


def _variant_table(request: CheckRequest, variants: Sequence[str], *, from_branches: bool,
                   matrix: Matrix) -> ResultSet | QuantTable:
    """One row per safetensors variant (local sub-directory, or Hub branch); a branch without a model is skipped
    and said, a wrong command is raised."""
    from qcheck.errors import AmbiguousTargetError, QcheckError
    from qcheck.hub.errors import RateLimitedError
    from qcheck.quant_table import QuantTable

    results: list[CheckResult] = []
    skipped: list[str] = []
    for v in variants:
        one = _tabled(request).replace(target=v, all_models=from_branches)
        try:
            got = run(one, matrix)
        except QcheckError as exc:
            if not from_branches or isinstance(exc, RateLimitedError) or (
                    isinstance(exc, UsageError) and not isinstance(exc, AmbiguousTargetError)):
                raise  # the command is wrong (e.g. no --gpu for an engine that needs one), not the branch
            skipped.append(f"{v}: {str(exc).splitlines()[0][:200]}")  # a branch without a model
            continue
        results.extend(got.results if isinstance(got, ResultSet) else [got])  # type: ignore[arg-type]
    if not results:
        raise UsageError(f"{request.target}: no branch holds a checkpoint qcheck can read ({'; '.join(skipped[:3])})")
    variant_set = ResultSet(request.target, results, kind="check-set", schema=CHECK_SET_SCHEMA)
    if request.all_models:
        return variant_set
    return QuantTable.from_set(variant_set, [f"skipped {s}" for s in skipped])
