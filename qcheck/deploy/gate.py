"""``qcheck gate`` over deployment manifests: each inference container found (``qcheck.deploy.manifests``) becomes
the ``CheckRequest`` it deploys (the image's engine and version, the GPU from its node labels, its command line),
answered by the one pipeline; a container qcheck cannot judge is an ``unknown`` verdict with the reason and the
manifest's file and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.errors import QcheckError
from qcheck.model import Verdict

if TYPE_CHECKING:
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


def _gap_outcome(policy: Policy, name: str, engine: str, reason: str) -> Judged:

    verdict = Verdict(engine=engine or "unknown", engine_version=None, gpu="unknown", arch=None,
                      compute_capability=None, status="unknown", reasons=[reason])
    data = verdict.to_json()
    fails = not policy_allows_unknown(policy)
    data.update({"policy": {"require_native": False, "allow_unknown": not fails, "target": "deployments"},
                 "memory_fails": False, "fails": fails})
    return Judged(name, name, "judged", verdicts=[data])


def policy_allows_unknown(policy: Policy) -> bool:
    return any(t.allow_unknown for t in policy.targets) if policy.targets else False


def _one(policy: Policy, spec: DeploymentSpec, item: Any, limits: Limits, matrix: Matrix) -> Judged:
    from dataclasses import replace

    from qcheck.deploy.cmdline import parse_command
    from qcheck.errors import UsageError
    from qcheck.pipeline import run
    from qcheck.request import CheckRequest, Deploy

    name = f"{item.file}:{item.line} {item.name}"
    try:
        cmd = parse_command(item.words, paths=policy.confinement())
    except UsageError as exc:  # e.g. a shell script around the engine: not a command line qcheck reads
        return _gap_outcome(policy, name, item.engine, f"{name}: {exc}")
    model = spec.models.get(cmd.model or "") or cmd.target() or spec.model or ""
    if not model:
        return _gap_outcome(policy, name, item.engine, f"{name}: the command names no model qcheck can read "
                                                       f"({cmd.model or 'none'}); map it under {spec.key}.models, or "
                                                       f"give {spec.key}.model")
    engine = f"{item.engine}=={item.version}" if item.version else item.engine
    mem = policy.memory
    deploy = Deploy(context=cmd.deploy.context or (mem.context if mem else None), batch=mem.batch if mem else 1,
                    kv_cache=cmd.deploy.kv_cache, parallel=cmd.deploy.parallel, knobs=cmd.deploy.knobs,
                    findings=(*cmd.deploy.findings, *_world_size(cmd, item.gpu_count)))
    origin = replace(cmd.origin, kind="manifest", file=item.file, line=item.line, image=item.image)
    notes = [*item.notes, *cmd.notes] + ([] if item.version else [f"image {item.image}: the tag names no release; "
                                                                  "judged at the newest the matrix knows"])
    request = CheckRequest(model, (engine,), (item.gpu,), deploy, memory=mem is not None, notes=tuple(notes),
                           limits=limits, origin=origin, allow_unknown=policy_allows_unknown(policy))
    result = run(request, matrix)
    outcome = Judged(name, model, "judged", inspection=result.inspection.to_json())  # type: ignore[union-attr]
    for verdict in result.verdicts:  # type: ignore[union-attr]
        data = verdict.to_json()
        memory_fails = bool(mem and mem.enforce and verdict.memory is not None and verdict.memory.fits is False)
        data.update({"policy": {"require_native": False, "allow_unknown": request.allow_unknown,
                                "target": spec.key},
                     "memory_fails": memory_fails, "fails": result.fails(verdict) or memory_fails,  # type: ignore[union-attr]
                     "deployment": origin.to_json()})
        outcome.verdicts.append(data)
    return outcome


def _world_size(cmd: Any, gpus: int | None) -> list[Any]:
    """vLLM on one node needs TP x PP GPUs: fewer is refused at start-up ("World size (N) is larger than the number
    of available GPUs (M) in this node", vllm/config/parallel.py:1159-1170 at 0.34.0) unless Ray or several nodes
    are configured."""
    from qcheck.request import CommandFinding

    if cmd.engine != "vllm" or not gpus:
        return []
    flags = {s.flag.split("=")[0].replace("_", "-") for s in cmd.origin.settings}
    if flags & {"--distributed-executor-backend", "--nnodes"}:
        return []
    world = (cmd.deploy.parallel.tp or 1) * (cmd.deploy.parallel.pp or 1)
    if world <= gpus:
        return []
    return [CommandFinding("vllm", "unsupported", "--tensor-parallel-size x --pipeline-parallel-size", str(world),
                           f"World size ({world}) is larger than the number of available GPUs ({gpus}) in this node",
                           "vllm-project/vllm: vllm/config/parallel.py:1159-1170 (ParallelConfig: CUDA device_count() < "
                           "world_size without Ray or --nnodes)", "0.34.0")]


def judge_deployments(policy: Policy, limits: Limits, matrix: Matrix) -> list[Judged]:
    from qcheck.deploy.manifests import Gap, read_manifest

    out: list[Judged] = []
    for spec in policy.deployments:
        try:
            items = read_manifest(spec.file, spec.shown, gpu_override=spec.gpu)
        except QcheckError as exc:
            out.append(Judged(spec.shown, spec.shown, "error", error=str(exc), error_kind="input"))
            continue
        for item in items:
            if isinstance(item, Gap):
                out.append(_gap_outcome(policy, f"{item.file}:{item.line} {item.name}", item.engine,
                                        f"{item.file}:{item.line}: {item.reason}"))
                continue
            try:
                out.append(_one(policy, spec, item, limits, matrix))
            except QcheckError as exc:
                out.append(Judged(f"{item.file}:{item.line} {item.name}", item.image, "error",
                                        error=str(exc), error_kind="input"))
    return out
