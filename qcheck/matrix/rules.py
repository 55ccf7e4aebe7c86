"""Rule matching over the matrix data: which rules hold for a combination, which one decides, and the
placeholder values their texts are filled with.

The primitives every judge shares (the weight-format rules in ``qcheck.matrix.resolve``, the KV-cache
dimension, the suggestions), kept below all of them so none has to import another back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from qcheck.matrix.schema import Backend, Engine, MatrixDataError, Rule, SuggestionRule, Target
from qcheck.matrix.versions import contains

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.model import Inspection

#: what ``matching_rules`` matches: rules and modifiers, or ``[[suggestion]]`` entries
R = TypeVar("R", Rule, SuggestionRule)


def fill(text: str, values: dict[str, str]) -> str:
    """Substitute ``{placeholder}`` values (see ``placeholders``) into a rule or suggestion text."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def placeholders(inspection: Inspection, engine: Engine, version: str, target: Target | None,
                 backend: str | None, types: list[str]) -> dict[str, str]:
    """The values of matrices/SCHEMA.md's placeholders for one combination (rules and suggestions alike)."""
    return {
        "types": ", ".join(types), "engine": engine.name, "version": version,
        "arch": target.arch.id if target else "", "gpu": target.label if target else "",
        "cc": (target.sm or "") if target else "", "method": inspection.quantization.method,
        "file_type": inspection.quantization.gguf_file_type or "", "backend": backend or "",
        "path": inspection.path,
        "adapter_rank": str(inspection.adapter.max_rank or "") if inspection.adapter else "",
        "base_model": (inspection.adapter.base_model if inspection.adapter else None) or "the base model",
    }


def dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def pick_backend(engine: Engine, explicit: str | None, target: Target | None) -> tuple[Backend | None, str | None]:
    """The backend an engine uses on this GPU, or (None, reason) when none fits."""
    if not engine.backends or target is None:
        return None, None
    backend: Backend | None
    if explicit is not None:
        backend = engine.backends[explicit]
        if target.vendor not in backend.vendors:
            return None, (f"the {backend.name} backend of {engine.name} does not run on {target.vendor} hardware "
                          f"(it runs on: {', '.join(backend.vendors)})")
        return backend, None
    backend = engine.default_backend(target.vendor)
    if backend is None:
        return None, f"{engine.name} has no backend for {target.vendor} hardware"
    return backend, None


def matching_rules(engine: Engine, inspection: Inspection, at: Version, target: Target | None,
                   backend: Backend | None, rules: Sequence[R] | None = None, *,
                   read_only: bool = False) -> list[tuple[R, list[str]]]:
    """Every rule whose versions, methods, match, hardware and backend conditions hold, with matched types.

    ``rules`` defaults to the engine's rules for the method; modifiers and ``[[suggestion]]`` entries
    carry the same conditions and are matched by passing them instead. ``read_only``: only rules read at ``at``
    (for what adds to a decided verdict: modifiers, KV-scale rules); deciding rules go through ``decide_read``.
    """
    method = inspection.quantization.method
    adapter = inspection.adapter is not None
    out: list[tuple[R, list[str]]] = []
    pool = cast("Sequence[R]", engine.rules_for(method)) if rules is None else rules
    for rule in pool:
        if adapter and not any(c.key.startswith("adapter") for c in rule.match):
            continue  # an adapter is not a model: only rules written for adapters judge it
        if rule.versions is not None and not contains(rule.versions, at):
            continue
        if read_only and isinstance(rule, Rule) and not read_at(rule, at):
            continue
        if rule.methods is not None and method not in rule.methods:
            continue
        if rule.backends is not None and (backend is None or backend.name not in rule.backends):
            continue
        if rule.hardware and (target is None or not all(h.test(target) for h in rule.hardware)):
            continue
        if target is not None and target.arch.explicit_rules and not _names_arch(rule) \
                and getattr(rule, "status", None) not in ("unsupported", "unknown"):
            continue  # a new architecture: a vendor- or capability-wide rule says nothing about it
        types: list[str] = []
        for cond in rule.match:
            holds, hit = cond.test(inspection)
            if not holds:
                break
            if hit:
                types.extend(hit)
        else:
            out.append((rule, types))
    return out


def _names_arch(rule: Rule | SuggestionRule) -> bool:
    """Whether a rule's hardware names an architecture or a product (not only a vendor or a capability range)."""
    return any(h.key in ("arch", "gpu") for h in rule.hardware)


def decide(engine: Engine, candidates: list[tuple[Rule, list[str]]]) -> list[tuple[Rule, list[str]]]:
    """The winning rule(s): most specific, then highest priority; a tie with different outcomes is a data error."""
    if not candidates:
        return []
    best = max((r.specificity, r.priority) for r, _ in candidates)
    winners = [(r, t) for r, t in candidates if (r.specificity, r.priority) == best]
    first = winners[0][0]
    for rule, _ in winners[1:]:
        if (rule.status, rule.kernel) != (first.status, first.kernel):
            raise MatrixDataError(
                engine.file, "ambiguous-rules",
                f"{first.label} ({first.status}) and {rule.label} ({rule.status}) both match with the same "
                f"specificity {best[0]} and priority {best[1]}: narrow one of them or set 'priority'",
                rule=f"rules '{first.id}' and '{rule.id}'")
    return winners


def read_at(rule: Rule, at: Version) -> bool:
    """Whether the rule was read at ``at`` (its ``verified`` covers it; a rule of a file not yet migrated to
    ``rules_verified`` counts as read wherever its ``versions`` hold)."""
    return rule.verified is None or rule.verified.covers(at)


def decide_read(engine: Engine, candidates: list[tuple[Rule, list[str]]], at: Version
                ) -> tuple[list[tuple[Rule, list[str]]], list[Rule]]:
    """(winners, unread): the deciding rule(s) among those read at ``at``, or, when a rule that was not read there
    is more specific than every rule that was (it would decide, but nobody has read this release for it), no
    winner and those unread rules: the answer is then ``unknown``, naming where they were read. A gate read at
    ``at`` (the engine refuses before anything more specific applies) decides over both, unless the rule read there
    that decides refuses too and is at least as specific (its message is the better one)."""
    read = [(r, t) for r, t in candidates if read_at(r, at)]
    unread = [(r, t) for r, t in candidates if not read_at(r, at) and not r.gate]
    winners = decide(engine, [(r, t) for r, t in read if not r.gate])
    gates = [(r, t) for r, t in read if r.gate]
    if gates:
        gate = max((r.specificity, r.priority) for r, _ in gates)
        first = winners[0][0] if winners else None
        if first is None or first.status != "unsupported" or (first.specificity, first.priority) < gate:
            return decide(engine, gates), []
    if unread:
        best = max((r.specificity, r.priority) for r, _ in unread)
        if not winners or best > (winners[0][0].specificity, winners[0][0].priority):
            return [], [r for r, _ in unread if (r.specificity, r.priority) == best]
    return winners, []


def decide_pool(engine: Engine, inspection: Inspection, at: Version, target: Target | None, explicit: str | None,
                pool: Sequence[Rule]) -> tuple[list[tuple[Rule, list[str]]], list[Rule], Backend | None]:
    """``decide_read`` over one pool of a dimension's rules (KV pairs, attention) on the backend the engine picks:
    (winners, unread, backend)."""
    backend, _ = pick_backend(engine, explicit, target)
    winners, unread = decide_read(engine, matching_rules(engine, inspection, at, target, backend, pool), at)
    return winners, unread, backend


def not_read_reason(engine: Engine, version: str, unread: list[Rule]) -> str:
    """"unknown: read at X-Y": why a combination some rule answers at other releases is unknown at this one."""
    shown = "; ".join(f"'{r.id}' ({r.status}) was read at {r.verified.label if r.verified else '?'}"
                      for r in unread)
    return (f"{engine.name} {version} was not read for this: the rule that answers it at other releases ({shown}) "
            "says nothing about this one")
