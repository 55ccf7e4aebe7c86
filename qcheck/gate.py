"""``qcheck gate``: run a whole policy (models x targets, memory, quality) and decide one exit code.

Every model is inspected once (headers only) and judged on every target; a model that cannot be read is
recorded as an error and the others are still judged, so one report shows everything. Exit code:
2 when any model (or the quality gate) could not be judged, else 1 when any verdict, memory fit or quality
threshold fails, else 0 (docs/design.md exit codes; the format never changes it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.errors import LfsPointerError, QcheckError, UnsafeFileError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.policy import Policy, check_quality_inputs

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix

GATE_SCHEMA = "qcheck.gate/1"


@dataclass
class ModelOutcome:
    """One model's part of the gate: its inspection and verdicts, or why it was not judged."""

    name: str
    path: str
    status: str  # "judged" | "error" | "skipped"
    error: str | None = None
    #: why it was not judged: "lfs-pointer", "unsafe-pickle", "input" (None when judged)
    error_kind: str | None = None
    inspection: dict[str, Any] | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failing(self) -> int:
        return sum(1 for v in self.verdicts if v.get("fails"))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "status": self.status, "error": self.error,
                "error_kind": self.error_kind,
                "inspection": self.inspection, "verdicts": self.verdicts, "failing": self.failing}


@dataclass
class GateResult:
    """The ``qcheck.gate/1`` record (``kind`` "gate" for the output layer)."""

    policy: Policy
    models: list[ModelOutcome]
    quality: dict[str, Any] | None = None  # {"reference", "eval": eval JSON | None, "error": str | None}
    kind: str = "gate"

    @property
    def nothing_judged(self) -> bool:
        """No combination was judged (every model skipped): a pass would say nothing, so it fails unless the
        policy says ``allow-nothing-judged = true``."""
        return not any(m.verdicts for m in self.models)

    @property
    def exit_code(self) -> int:
        if any(m.status == "error" for m in self.models) or (self.quality or {}).get("error"):
            return 2
        if any(m.failing for m in self.models) or (self.nothing_judged and not self.policy.allow_nothing_judged):
            return 1
        if self.quality and self.quality.get("eval") and self.quality["eval"].get("exit_code"):
            return 1
        return 0

    def summary(self) -> dict[str, Any]:
        q = self.quality or {}
        return {
            "models": len(self.models),
            "judged": sum(1 for m in self.models if m.status == "judged"),
            "errors": sum(1 for m in self.models if m.status == "error"),
            "skipped": sum(1 for m in self.models if m.status == "skipped"),
            "verdicts": sum(len(m.verdicts) for m in self.models),
            "failing": sum(m.failing for m in self.models),
            "quality_failed": bool(q.get("eval") and q["eval"].get("exit_code")),
            "quality_error": bool(q.get("error")),
            "nothing_judged": self.nothing_judged,
        }

    def to_json(self) -> dict[str, Any]:
        return {"schema": GATE_SCHEMA, "policy": self.policy.to_json(), "summary": self.summary(),
                "models": [m.to_json() for m in self.models], "quality": self.quality, "exit_code": self.exit_code}


def _display(path: str, hub: bool) -> str:
    if hub or not os.path.isabs(path):
        return path
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def run_gate(policy: Policy, limits: Limits = DEFAULT_LIMITS, *, matrix: Matrix | None = None) -> GateResult:
    """Judge every model of ``policy`` on every target, then run the quality gate if the policy has one.

    Each model is inspected once; each (model, target) question is the policy's ``CheckRequest`` for it,
    answered by the same pipeline as ``qcheck check`` (``qcheck.pipeline.judge``).
    """
    from qcheck.doors import build_request
    from qcheck.matrix import load_matrix
    from qcheck.outcome import verdict_record
    from qcheck.pipeline import inspect, judge

    check_quality_inputs(policy)  # before any model is read: a bad reference or task file is not found at the end
    matrix = matrix or load_matrix()
    outcomes: list[ModelOutcome] = []
    inspections: dict[str, Any] = {}
    for spec in policy.models:
        shown = _display(spec.path, spec.hub)
        try:
            inspection = inspect(build_request(policy.asked(None, limits), spec.path))[0]
        except LfsPointerError as exc:
            status = "skipped" if policy.lfs_pointers == "skip" else "error"
            outcomes.append(ModelOutcome(spec.name, shown, status, error=_relabel(str(exc), spec.path, shown),
                                         error_kind="lfs-pointer"))
            continue
        except QcheckError as exc:
            kind = "unsafe-pickle" if isinstance(exc, UnsafeFileError) else "input"
            outcomes.append(ModelOutcome(spec.name, shown, "error", error=_relabel(str(exc), spec.path, shown),
                                         error_kind=kind))
            continue
        inspection.path = shown
        inspections[spec.name] = (spec, inspection)
        outcome = ModelOutcome(spec.name, shown, "judged", inspection=inspection.to_json())
        for target in policy.targets:
            if not target.applies_to(spec):
                continue
            request = build_request(policy.asked(target, limits), spec.path)
            result = judge(inspection, request, matrix)
            outcome.verdicts.extend(verdict_record(v, request, target=target.key) for v in result.verdicts)
        outcomes.append(outcome)
    if policy.deployments:
        from qcheck.deploy.gate import judge_deployments

        outcomes.extend(ModelOutcome(**vars(j)) for j in judge_deployments(policy, limits, matrix))
    quality = _run_quality(policy, inspections, limits) if policy.quality else None
    return GateResult(policy=policy, models=outcomes, quality=quality)


def _relabel(message: str, path: str, shown: str) -> str:
    """The error without the model's path in front (the report names the model already)."""
    message = message.replace(path, shown) if path != shown else message
    return message[len(shown) + 2:] if message.startswith(f"{shown}: ") else message


def _run_quality(policy: Policy, inspections: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """Run ``qcheck eval`` on the policy's local models; a QcheckError is recorded (exit 2), not raised."""
    q = policy.quality
    assert q is not None
    out: dict[str, Any] = {"reference": q.reference, "eval": None, "error": None, "candidates": []}
    wanted = q.models if q.models is not None else [name for name, (spec, _) in inspections.items() if not spec.hub]
    candidates = []
    for name in wanted:
        if name not in inspections:
            continue  # not judged (error or skipped): already reported
        spec, _ = inspections[name]
        if spec.hub:
            out["error"] = f"quality: {name} is a Hub repo; the quality gate needs local model files"
            return out
        candidates.append((name, spec.path))
    out["candidates"] = [n for n, _ in candidates]
    from qcheck.readers import looks_like_repo_id

    if not os.path.exists(q.reference) and not looks_like_repo_id(q.reference):
        out["error"] = f"quality: reference {q.reference}: no such directory"
        return out
    if not candidates:
        out["error"] = "quality: no local model could be evaluated (every model failed to load or was skipped)"
        return out
    try:
        from qcheck.eval.run import CandidateSpec, EvalConfig, run_eval

        specs: list[CandidateSpec | str] = [CandidateSpec(name=n, path=p) if q.backend == "simulated"
                 else CandidateSpec(name=n, path=p, backend=q.backend) for n, p in candidates]
        config = EvalConfig(reference=q.reference, candidates=specs,
                            tasks=list(q.tasks), reference_dtype=q.reference_dtype, device=q.device,
                            cache_dir=q.cache_dir, max_length=q.max_length, stride=q.stride,
                            windows=q.windows, thresholds=q.thresholds,
                            max_items=q.max_items, limits=limits, simulate_engine=q.simulate_engine,
                            kv_split=q.kv_split, kv_cache=q.kv_cache)
        result = run_eval(config)
    except QcheckError as exc:
        out["error"] = f"quality: {exc}"
        return out
    data = result.to_json()
    for c in data.get("candidates") or []:  # show the names the policy uses, not absolute paths
        c["path"] = _display(str(c.get("path") or ""), False) or c.get("name")
    out["eval"] = data
    return out
