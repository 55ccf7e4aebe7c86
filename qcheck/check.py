"""``qcheck check``: judge a checkpoint against engines x GPUs and decide the exit code.

The checkpoint is inspected (headers only) or read back from a saved ``qcheck inspect --json`` record,
the ``--engine``/``--gpu`` values are resolved against the matrix, and every combination gets a Verdict.
Exit codes (docs/design.md): 0 all run, 1 any cannot run / unknown (unless allowed) / fallback when native
is required, 2 input not judged (raised as QcheckError before any result exists).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.errors import UnsafeFileError, UsageError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import CHECK_SCHEMA, Inspection, Verdict
from qcheck.saved_inspection import inspection_from_json, load_saved_inspection

if TYPE_CHECKING:
    from qcheck.matrix import EngineRequest, Matrix, Target
    from qcheck.model import Checkpoint
    from qcheck.report import Result

__all__ = ["CHECK_SET_SCHEMA", "INSPECTION_SET_SCHEMA", "CheckResult", "ResultSet", "check_path", "check_paths",
           "inspect_target", "inspection_from_json", "load_saved_inspection", "load_target", "load_targets", "plan",
           "run_check", "verdict_fails"]

CHECK_SET_SCHEMA = "qcheck.check-set/1"
INSPECTION_SET_SCHEMA = "qcheck.inspection-set/1"
#: builds the per-verdict hook for one model from its Inspection and Checkpoint (None for a saved inspection)
Annotator = Callable[["Inspection", "Checkpoint | None"], Callable[[Inspection, Verdict], None]]


@dataclass
class CheckResult:
    """The result of ``qcheck check``: the inspection and one verdict per (engine, GPU)."""

    inspection: Inspection
    verdicts: list[Verdict]
    require_native: bool = False
    allow_unknown: bool = False
    warnings: list[str] = field(default_factory=list)
    kind: str = "check"
    #: a run-time risk of kind "kv-scales" (default KV-cache scales of 1.0) fails the verdict (issue #24)
    require_kv_scales: bool = False
    #: ``--gpu`` without ``--engine``: every engine was tried to explore, not to gate. Verdicts are sorted
    #: (native, fallback, unknown, unsupported) and the run exits 0 when any engine runs the checkpoint.
    explore: bool = False

    def fails(self, verdict: Verdict) -> bool:
        """Whether this verdict makes the run fail (exit 1) under the chosen policy."""
        return verdict_fails(verdict, require_native=self.require_native, allow_unknown=self.allow_unknown,
                             require_kv_scales=self.require_kv_scales)

    @property
    def exit_code(self) -> int:
        if self.explore:
            return 0 if any(not self.fails(v) for v in self.verdicts) else 1
        return 1 if any(self.fails(v) for v in self.verdicts) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CHECK_SCHEMA,
            "inspection": self.inspection.to_json(),
            "verdicts": [v.to_json() for v in self.verdicts],
            "policy": {"require_native": self.require_native, "allow_unknown": self.allow_unknown,
                       "require_kv_scales": self.require_kv_scales},
            "warnings": list(self.warnings),
            "explore": self.explore,
            "exit_code": self.exit_code,
        }


#: the order an exploration lists verdicts in: what works first
EXPLORE_ORDER = {"native": 0, "fallback": 1, "unknown": 2, "unsupported": 3}


@dataclass
class ResultSet:
    """Several models judged in one run (``--all``): one result per model, the worst exit code (2 > 1 > 0).

    ``kind`` is the per-model kind plus ``-set`` ("check-set", "inspect-set"); renderers iterate ``results``.
    """

    target: str
    results: Sequence[Result]  # covariant: a list of CheckResult or of InspectResult
    kind: str
    schema: str

    @property
    def exit_code(self) -> int:
        return max((r.exit_code for r in self.results), default=0)

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "target": self.target, "results": [r.to_json() for r in self.results],
                "exit_code": self.exit_code}


def verdict_fails(verdict: Verdict, *, require_native: bool = False, allow_unknown: bool = False,
                  require_kv_scales: bool = False) -> bool:
    """DESIGN exit-code rule for one verdict: unsupported fails; unknown fails unless allowed; fallback
    fails only when native is required; a verdict that runs with default KV-cache scales (a "kv-scales" risk)
    fails only when calibrated scales are required."""
    if verdict.status == "unsupported":
        return True
    if verdict.status == "unknown":
        return not allow_unknown
    if require_kv_scales and any(r.kind == "kv-scales" for r in verdict.risks):
        return True
    if verdict.status == "fallback":
        return require_native
    return False


def plan(engines: Sequence[str], gpus: Sequence[str],
         matrix: Matrix | None = None) -> tuple[list[EngineRequest], list[Target]]:
    """Resolve ``--engine``/``--gpu`` values into requests and targets (usage errors before any file is read).

    No ``--engine`` with ``--gpu``: every engine that runs on the GPU's vendor. ``--engine`` without
    ``--gpu``: only providers (hosted, no GPU) can be judged; GPU engines need ``--gpu``.
    """
    from qcheck.matrix import load_matrix, parse_engine_spec

    matrix = matrix or load_matrix()
    if not engines and not gpus:
        raise UsageError("say what to check against: --engine E and/or --gpu G (e.g. --engine vllm --gpu h100); "
                         "with only --gpu every engine is checked")
    targets = [matrix.gpus.lookup(g) for g in gpus]
    # repeated values are judged once
    targets = list({(t.label, t.arch.id, t.cc): t for t in targets}.values())
    if engines:
        requests = [parse_engine_spec(e, matrix) for e in engines]
    else:
        from qcheck.matrix.resolve import EngineRequest

        requests = [EngineRequest(e) for e in matrix.engines.values() if e.needs_gpu]
    requests = list({r.label: r for r in requests}.values())
    missing = [r.engine.name for r in requests if r.engine.needs_gpu and not targets]
    if missing:
        raise UsageError(f"{', '.join(missing)} {'runs' if len(missing) == 1 else 'run'} on hardware you choose: "
                         "add --gpu (a product like h100 or rtx-4090, an architecture like hopper, sm90, or cpu)")
    return requests, targets


def run_check(inspection: Inspection, engines: Sequence[str], gpus: Sequence[str], *,
              require_native: bool = False, allow_unknown: bool = False, matrix: Matrix | None = None,
              annotate: Callable[[Inspection, Verdict], None] | None = None) -> CheckResult:
    """Judge an Inspection against the cross product of engines and GPUs.

    ``annotate(inspection, verdict)`` runs on every verdict afterwards: the hook for extra per-verdict
    fields such as the memory-fit estimate (``verdict.memory``; the GPU's memory is
    ``load_matrix().gpus.gpus[verdict.gpu].memory_gib``).
    """
    from qcheck.matrix import load_matrix

    matrix = matrix or load_matrix()
    requests, targets = plan(engines, gpus, matrix)
    return _judge(matrix, inspection, requests, targets, implied_engines=not engines,
                  require_native=require_native, allow_unknown=allow_unknown, annotate=annotate)


def check_path(target: str, engines: Sequence[str], gpus: Sequence[str], *,
               limits: Limits = DEFAULT_LIMITS, require_native: bool = False, allow_unknown: bool = False,
               matrix: Matrix | None = None,
               annotate: Callable[[Inspection, Verdict], None] | None = None,
               options: dict[str, Any] | None = None) -> CheckResult:
    """``qcheck check TARGET``: validate the flags, inspect the checkpoint (or load a saved inspection), judge it."""
    return _check_all(target, engines, gpus, limits=limits, require_native=require_native,
                      allow_unknown=allow_unknown, all_models=False, matrix=matrix,
                      annotator=(lambda _ins, _ck: annotate) if annotate is not None else None, options=options)[0]


def check_paths(target: str, engines: Sequence[str], gpus: Sequence[str], *,
                limits: Limits = DEFAULT_LIMITS, require_native: bool = False, allow_unknown: bool = False,
                all_models: bool = False, matrix: Matrix | None = None,
                annotator: Annotator | None = None, options: dict[str, Any] | None = None) -> CheckResult | ResultSet:
    """``qcheck check TARGET [--all]``: usage errors first, then every model the target names, each judged.

    Without ``all_models`` the one model's CheckResult; with it always a "check-set" ResultSet (one model or
    several). ``annotator(inspection, checkpoint)`` gives each model its per-verdict hook (the memory estimate
    needs the Checkpoint's config or GGUF keys).
    """
    results = _check_all(target, engines, gpus, limits=limits, require_native=require_native,
                         allow_unknown=allow_unknown, all_models=all_models, matrix=matrix, annotator=annotator,
                         options=options)
    if not all_models:
        return results[0]
    return ResultSet(target, list(results), kind="check-set", schema=CHECK_SET_SCHEMA)


def _check_all(target: str, engines: Sequence[str], gpus: Sequence[str], *, limits: Limits, require_native: bool,
               allow_unknown: bool, all_models: bool, matrix: Matrix | None,
               annotator: Annotator | None, options: dict[str, Any] | None = None) -> list[CheckResult]:
    from qcheck.matrix import load_matrix

    matrix = matrix or load_matrix()
    requests, targets = plan(engines, gpus, matrix)  # usage errors first, before reading anything
    results = []
    for inspection, checkpoint in load_targets(target, limits, all_models=all_models):
        annotate = annotator(inspection, checkpoint) if annotator is not None else None
        results.append(_judge(matrix, inspection, requests, targets, implied_engines=not engines,
                              require_native=require_native, allow_unknown=allow_unknown, annotate=annotate,
                              options=options))
    return results


def _judge(matrix: Matrix, inspection: Inspection, requests: list[EngineRequest], targets: list[Target], *,
           implied_engines: bool, require_native: bool, allow_unknown: bool,
           annotate: Callable[[Inspection, Verdict], None] | None,
           options: dict[str, Any] | None = None) -> CheckResult:
    """One verdict per planned (engine, GPU); engines implied by ``--gpu`` alone are judged only on the
    vendors they run on."""
    from qcheck.matrix import resolve
    from qcheck.request import Deploy, KVCacheTypes, Parallel

    opts = options or {}
    deploy = Deploy(kv_cache=KVCacheTypes.parse(opts.get("kv_cache_dtype")),
                    parallel=Parallel(tp=opts.get("tp"), pp=opts.get("pp"), ep=opts.get("ep")))
    verdicts = resolve(matrix, inspection, requests, targets, skip_foreign=implied_engines, deploy=deploy)
    if annotate is not None:
        for verdict in verdicts:
            annotate(inspection, verdict)
    if implied_engines and targets:
        verdicts.sort(key=lambda v: EXPLORE_ORDER.get(v.status, 4))  # stable: engine order within a status
    return CheckResult(inspection, verdicts, require_native=require_native, allow_unknown=allow_unknown,
                       explore=implied_engines and bool(targets),
                       require_kv_scales=bool(opts.get("require_kv_scales")))


def inspect_target(target: str, limits: Limits = DEFAULT_LIMITS) -> Inspection:
    """The Inspection of a checkpoint (or of a saved inspection record); a pickle raises UnsafeFileError."""
    return load_target(target, limits)[0]


def load_target(target: str, limits: Limits = DEFAULT_LIMITS) -> tuple[Inspection, Checkpoint | None]:
    """The Inspection of a checkpoint and the Checkpoint it came from (None for a saved inspection record, which
    has no headers behind it); a pickle raises UnsafeFileError. Callers that need more than the Inspection (the
    memory estimate reads config.json or the GGUF keys) use this, so nothing is read twice."""
    return load_targets(target, limits)[0]


def load_targets(target: str, limits: Limits = DEFAULT_LIMITS, *, all_models: bool = False
                 ) -> list[tuple[Inspection, Checkpoint | None]]:
    """``load_target`` for every model the target names (``all_models``: each GGUF model of a directory or repo)."""
    inspection = load_saved_inspection(target, limits)
    if inspection is not None:
        pairs: list[tuple[Inspection, Checkpoint | None]] = [(inspection, None)]
    else:
        from qcheck.classify import classify
        from qcheck.readers import load_checkpoints

        pairs = [(classify(ck), ck) for ck in load_checkpoints(target, limits, all_models=all_models)]
    for inspection, _ in pairs:
        if inspection.container == "pickle":
            # a pickle cannot be judged from headers and is never loaded: exit 2, as `qcheck inspect` does
            from qcheck.inspect import InspectResult

            raise UnsafeFileError(InspectResult(inspection).error_line())
    return pairs
