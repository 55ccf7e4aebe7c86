"""A verdict judges the whole deployment, one dimension at a time, and the worst dimension decides.

DESIGN: the status of a verdict is the worst of its dimensions (the model architecture, the weight format on
the GPU, the KV-cache dtype, the parallel layout) and ``reasons`` names the dimension that decided it. Each
dimension is a function ``(Deployment) -> Judgement | None`` (None: it has nothing to say about this
combination, e.g. no parallel layout was asked for). ``combine`` folds the judgements into the Verdict.

The weight-format judgement is the matrix rules' own verdict (``qcheck.matrix.resolve``); the other
dimensions are registered in ``DIMENSIONS`` (or passed explicitly) and run after it. To add one: write a
function returning a ``Judgement`` with ``dimension`` set to its name, and append it to ``DIMENSIONS``.

Order of badness (worst first): unsupported, unknown, fallback, native. On a tie the weight-format verdict
keeps its own reasons, so a deployment every other dimension accepts reads exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from qcheck.matrix.deployment import Deployment, Dimension
from qcheck.model import Judgement, Status, Verdict

__all__ = ["DIMENSIONS", "WEIGHTS", "Deployment", "Dimension", "Judgement", "combine", "fold", "judge_dimensions",
           "without_architecture", "worst"]

#: the name of the weight-format dimension (the matrix rules' own verdict)
WEIGHTS = "weights"
#: worst first; ``worst()`` picks the lowest index
SEVERITY: tuple[Status, ...] = ("unsupported", "unknown", "fallback", "native")


def _architecture(d: Deployment) -> Judgement | None:
    from qcheck.matrix.architectures import judge_architecture

    return judge_architecture(d)


#: dimensions judged beside the weight format, in report order
DIMENSIONS: list[Dimension] = [_architecture]


def _builtin() -> None:
    from qcheck.matrix.attention import judge_attention
    from qcheck.matrix.builds import judge_build
    from qcheck.matrix.command import judge_command
    from qcheck.matrix.known_issues import judge_known_issues
    from qcheck.matrix.kvcache import judge_kv_cache
    from qcheck.matrix.parallel import judge_parallel

    DIMENSIONS.extend([judge_build, judge_kv_cache, judge_attention, judge_parallel, judge_command, judge_known_issues])


_builtin()


def without_architecture() -> list[Dimension]:
    """The registered dimensions minus the architecture (for synthetic format probes that name no model)."""
    return [d for d in DIMENSIONS if d is not _architecture]


def worst(statuses: Sequence[Status]) -> Status:
    """The worst status of several (unsupported > unknown > fallback > native); native for none."""
    return min(statuses, key=SEVERITY.index, default="native")


def judge_dimensions(deployment: Deployment, dimensions: Sequence[Dimension] | None = None) -> list[Judgement]:
    """Every dimension's judgement of a deployment, in order (dimensions with nothing to say are left out)."""
    out = []
    for dimension in DIMENSIONS if dimensions is None else dimensions:
        judgement = dimension(deployment)
        if judgement is not None:
            out.append(judgement)
    return out


def combine(verdict: Verdict, judgements: Sequence[Judgement]) -> Verdict:
    """Fold dimension judgements into the weight-format verdict, in place; returns it.

    The verdict gains ``dimensions`` (the weight format's own judgement first). When another dimension is
    strictly worse it decides: the status becomes its status, its reasons come first, each prefixed with the
    dimension's name, and its suggestions lead. Sources, requirements and warnings of every dimension are kept.
    """
    weights = Judgement(WEIGHTS, verdict.status, list(verdict.reasons), list(verdict.sources),
                        list(verdict.suggestions), list(verdict.requires))
    verdict.dimensions = [weights, *judgements]
    return _fold_in(verdict, judgements)


def fold(verdict: Verdict, judgement: Judgement) -> Verdict:
    """Add one dimension judged after the others (the engine's start-up, which needs the memory estimate) to a
    verdict ``combine`` has built, in place: the status and reasons are decided again from the weight format's
    judgement and every dimension, as ``combine`` decides them (the suggestions found since are kept)."""
    if not verdict.dimensions:
        return combine(verdict, [judgement])
    weights = verdict.dimensions[0]
    verdict.status = weights.status
    verdict.reasons = list(weights.reasons)
    verdict.dimensions = [*verdict.dimensions, judgement]
    return _fold_in(verdict, verdict.dimensions[1:])


def _fold_in(verdict: Verdict, judgements: Sequence[Judgement]) -> Verdict:
    """The worst dimension decides the status, its reasons first; every dimension's sources, requirements,
    warnings and risks are kept (once)."""
    if not judgements:
        return verdict
    status = worst([verdict.status, *(j.status for j in judgements)])
    deciding = [j for j in judgements if j.status == status]
    if status != verdict.status:
        verdict.status = status
        lead = [f"{j.dimension}: {r}" for j in deciding for r in j.reasons]
        verdict.reasons = _dedupe([*lead, *(f"{WEIGHTS}: {r}" for r in verdict.reasons)])
        verdict.suggestions = _dedupe([*(s for j in deciding for s in j.suggestions), *verdict.suggestions])
    elif status != "native":
        # a tie: the weight format's reasons stay first, the other dimensions' reasons follow
        others = [f"{j.dimension}: {r}" for j in deciding for r in j.reasons]
        verdict.reasons = _dedupe([*verdict.reasons, *others])
        verdict.suggestions = _dedupe([*verdict.suggestions, *(s for j in deciding for s in j.suggestions)])
    verdict.requires = _dedupe([*verdict.requires, *(r for j in judgements for r in j.requires)])
    verdict.warnings = _dedupe([*verdict.warnings, *(f"{j.dimension}: {w}" for j in judgements for w in j.warnings)])
    for risk in (r for j in judgements for r in j.risks):
        if all(r.id != risk.id for r in verdict.risks):
            verdict.risks.append(risk)
    seen = {(s.ref, s.version) for s in verdict.sources}
    for j in judgements:
        for s in j.sources:
            if (s.ref, s.version) not in seen:
                seen.add((s.ref, s.version))
                verdict.sources.append(s)
    return verdict


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))
