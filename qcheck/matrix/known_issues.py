"""Known issues as a dimension: reports in an engine's tracker that change what a user gets, for the versions,
checkpoints, GPUs, KV-cache pairs and engine knobs they name (``matrices/known_issues.toml``).

Code inspection tells what an engine accepts and which kernel it ranks first; a tracker report tells what that
choice costs (a kernel picked on a GPU it fails on, a fast path that is twice as slow as the one behind it, a
quantised cache that collapses prompt speed). Each entry is verified against the released code (``verified =
"code"``, with the file and line in ``evidence``, re-checked by ``matrices/tools/verify_known_issues.py``) or a
maintainer's statement. An entry's ``effect`` is a warning on the verdict (and a ``known-issue`` risk), or the
status it forces where it decides the outcome (``fallback``, ``unsupported``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from qcheck.model import Judgement, Risk, Source, Status

if TYPE_CHECKING:
    from qcheck.matrix.deployment import Deployment
    from qcheck.matrix.schema import KnownIssue

DIMENSION = "known-issues"


def judge_known_issues(deployment: Deployment) -> Judgement | None:
    """Every known issue that holds for the deployment, as one judgement (the worst effect decides), or None."""
    from qcheck.matrix.kvcache import requested_kv
    from qcheck.matrix.rules import fill, matching_rules, pick_backend, placeholders

    engine = deployment.request.engine
    if not engine.known_issues:
        return None
    asked = requested_kv(deployment)
    pool = [issue for issue in engine.known_issues if _pair_holds(issue, asked.k if asked else None,
                                                                  asked.v if asked else None)
            and all(getattr(deployment.deploy.knobs, n) == v for n, v in issue.knobs)]
    backend, _ = pick_backend(engine, deployment.request.backend, deployment.target)
    held = {id(r) for r, _ in matching_rules(engine, deployment.inspection, deployment.at, deployment.target, backend,
                                             [i.rule for i in pool])}
    found = [i for i in pool if id(i.rule) in held]
    if not found:
        return None
    values = placeholders(deployment.inspection, engine, deployment.version, deployment.target,
                          backend.name if backend else None, [])
    values.update(k=asked.k if asked else "", v=asked.v if asked else "")
    # the worst effect decides (unsupported > fallback > native: the order of dimensions.SEVERITY, which imports this)
    status = min((i.rule.status for i in found), key=("unsupported", "unknown", "fallback", "native").index)
    judgement = Judgement(DIMENSION, cast(Status, status))  # a rule's status is validated on load
    for issue in found:
        text = _text(issue, fill(issue.message, values))
        judgement.warnings.append(text)
        judgement.risks.append(Risk(issue.rule.id, "known-issue", text))
        if issue.rule.status == status and status != "native":
            judgement.reasons.append(text)
        judgement.sources += [Source(ref=s.ref, version=s.version) for s in issue.rule.sources
                              if Source(ref=s.ref, version=s.version) not in judgement.sources]
    return judgement


def _pair_holds(issue: KnownIssue, k: str | None, v: str | None) -> bool:
    """An issue about a KV-cache pair holds only when a pair is asked (or declared) and its conditions hold."""
    if issue.pair is None:
        return True
    return k is not None and v is not None and issue.pair.holds(k, v)


def _text(issue: KnownIssue, message: str) -> str:
    """The message, the workaround and the tracker links, as the verdict says them."""
    out = f"{issue.title}: {message.rstrip()}"
    if not out.endswith((".", "!", "?")):
        out += "."
    if issue.workaround:
        out += f" Workaround: {issue.workaround}."
    return out + f" ({', '.join(issue.links)}; {issue.tracker_state}, verified in {issue.verified} at " \
                 f"{issue.verified_at})"
