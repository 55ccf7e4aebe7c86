"""``qcheck gate`` over deployment manifests: each inference container found (``qcheck.deploy.manifests``) becomes
the ``CheckRequest`` it deploys (``qcheck.doors.build_request``: the image's engine and version, the GPU and GPU count
from its node labels and resources, its command line), answered by the one pipeline and judged pass or fail by
``qcheck.outcome`` under the policy's top-level strictness; a container qcheck cannot judge is an ``unknown``
verdict with the reason and the manifest's file and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.check import CheckResult
from qcheck.errors import QcheckError
from qcheck.model import Verdict

if TYPE_CHECKING:
    from qcheck.deploy.manifests import Container
    from qcheck.deploy.paths import PathRule
    from qcheck.doors import Asked
    from qcheck.limits import Limits
    from qcheck.matrix import Matrix
    from qcheck.policy import DeploymentSpec, Policy

__all__ = ["Judged", "judge_deployments"]


@dataclass
class Judged:
    """One container's part of the gate, with the fields of ``qcheck.gate.Judged`` (which the gate builds
    from it: this module does not import the gate)."""

    name: str
    path: str
    status: str
    error: str | None = None
    error_kind: str | None = None
    inspection: dict[str, Any] | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)


def _gap_outcome(asked: Asked, name: str, engine: str, reason: str) -> Judged:
    """A container qcheck cannot judge: an unknown verdict, failing as any unknown does under the policy."""
    from qcheck.outcome import verdict_record

    verdict = Verdict(engine=engine or "unknown", engine_version=None, gpu="unknown", arch=None,
                      compute_capability=None, status="unknown", reasons=[reason])
    return Judged(name, name, "judged", verdicts=[verdict_record(verdict, asked, target="deployments")])


def _one(asked: Asked, spec: DeploymentSpec, item: Container, matrix: Matrix, paths: PathRule) -> Judged:
    """One container, judged as the request ``qcheck.doors.build_request`` makes of it; the local files its command
    names are confined to ``paths`` (the policy's repository unless --allow-outside)."""
    from qcheck.doors import EntryGap, ManifestEntry, build_request
    from qcheck.outcome import verdict_record
    from qcheck.pipeline import run

    name = f"{item.file}:{item.line} {item.name}"
    entry = ManifestEntry(tuple(item.words), item.engine, item.version, item.gpu, item.gpu_count, item.file,
                          item.line, item.image, tuple(item.notes), spec.models, spec.model, spec.key, paths)
    try:
        request = build_request(asked, entry=entry)
    except EntryGap as exc:
        return _gap_outcome(asked, name, item.engine, f"{name}: {exc}")
    result = run(request, matrix)
    assert isinstance(result, CheckResult)
    outcome = Judged(name, request.target, "judged", inspection=result.inspection.to_json())
    origin = request.origin.to_json() if request.origin is not None else None
    outcome.verdicts.extend({**verdict_record(v, request, target=spec.key), "deployment": origin}
                            for v in result.verdicts)
    return outcome


def judge_deployments(policy: Policy, limits: Limits, matrix: Matrix) -> list[Judged]:
    """Every container of every manifest the policy lists, under the policy's top-level strictness."""
    from qcheck.deploy.manifests import Gap, read_manifest

    asked = policy.asked(None, limits)
    paths = policy.confinement()
    out: list[Judged] = []
    for spec in policy.deployments:
        try:
            items = read_manifest(spec.file, spec.shown, gpu_override=spec.gpu)
        except QcheckError as exc:
            out.append(Judged(spec.shown, spec.shown, "error", error=str(exc), error_kind="input"))
            continue
        for item in items:
            if isinstance(item, Gap):
                out.append(_gap_outcome(asked, f"{item.file}:{item.line} {item.name}", item.engine,
                                        f"{item.file}:{item.line}: {item.reason}"))
                continue
            try:
                out.append(_one(asked, spec, item, matrix, paths))
            except QcheckError as exc:
                out.append(Judged(f"{item.file}:{item.line} {item.name}", item.image, "error",
                                        error=str(exc), error_kind="input"))
    return out
