"""Exercise the whole matrix: every probe x engine x version x backend x architecture must resolve.

Used by ``qcheck matrix --validate`` and the completeness test: loading catches schema errors, this
catches what only resolution can (ambiguous rules), and counts the cells nobody has sourced yet.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qcheck.matrix.probes import PROBES
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.matrix.versions import parse_version

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.matrix.loader import Matrix
    from qcheck.matrix.schema import Engine, Rule
    from qcheck.model import Inspection, Verdict


@dataclass
class Audit:
    cells: int = 0
    statuses: Counter = field(default_factory=Counter)
    #: (engine, version, backend, arch, probe label) of cells that have no sourced rule at all
    unsourced: list[tuple[str, str, str | None, str | None, str]] = field(default_factory=list)
    #: verdicts whose status is unknown but that carry no reason (must stay empty)
    unexplained: list[Verdict] = field(default_factory=list)
    #: (engine, rule id, versions read) of rules that cover every later version although all their sources
    #: were read at versions older than the engine's newest (give them an upper bound or re-read them)
    open_ended: list[tuple[str, str, str]] = field(default_factory=list)
    #: the same for rules whose status is ``unknown``: they claim nothing a later release could contradict
    open_unknown: list[tuple[str, str, str]] = field(default_factory=list)
    #: (engine, version) -> cells there decided by a rule none of whose sources was read at that version (rules
    #: without ``verified`` only: a rule with it answers only where it was read)
    borrowed: Counter = field(default_factory=Counter)
    #: (engine, version) -> cells ``unknown`` there because the rule that answers them was not read at that version
    not_read: Counter = field(default_factory=Counter)
    #: engine id -> rules (incl. KV-pair, attention and KV-scale rules) that do not state ``verified`` yet
    unverified: dict[str, int] = field(default_factory=dict)

    def require_verified(self, matrix: Matrix) -> None:
        """``qcheck matrix --validate`` refuses a shipped rule that does not state the releases it was read at: such
        a rule would answer at every listed release (issue #35). A file not yet migrated still loads for checks."""
        for ident, missing in sorted(self.unverified.items()):
            raise MatrixDataError(matrix.engines[ident].file, "missing-verified",
                                  f"{missing} rule(s) do not state the releases they were read at: give each "
                                  "verified = [...] and set [engine] rules_verified = true "
                                  "(python matrices/tools/migrate_verified.py FILE does it from the rules' sources)")

    def summary(self) -> str:
        parts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        return f"{self.cells} cells: {parts}; {len(self.unsourced)} without a sourced rule"

    def notes(self) -> list[str]:
        """What ``--validate`` reports beyond errors: rules and cells whose version coverage is inferred."""
        lines = []
        if self.open_ended:
            lines.append(f"{len(self.open_ended)} rules are open-ended while every source was read at an older "
                         "version than the engine's newest:")
            lines += [f"  {engine}: rule '{rule}' (read at {read})" for engine, rule, read in self.open_ended]
        if self.open_unknown:
            lines.append(f"{len(self.open_unknown)} more open-ended rules answer `unknown` (they claim nothing a later "
                         "release could contradict): " + ", ".join(f"{e}:{r}" for e, r, _ in self.open_unknown))
        if self.unverified:
            lines.append("rules that do not state the releases they were read at (`verified`; the file is not "
                         "`rules_verified` yet): " + ", ".join(f"{e} {n}" for e, n in sorted(self.unverified.items())))
        if self.not_read:
            lines.append(f"{sum(self.not_read.values())} cells are unknown because the rule that answers them was not "
                         "read at the version asked: " + ", ".join(f"{e} {v}: {n}" for (e, v), n
                                                                     in sorted(self.not_read.items())))
        if self.borrowed:
            total = sum(self.borrowed.values())
            lines.append(f"{total} cells are answered by a rule read at another version than the one asked:")
            lines += [f"  {engine} {version}: {n}" for (engine, version), n in sorted(self.borrowed.items())]
        return lines


def _read_at(rule: Rule, scheme: str) -> list[Version] | None:
    """The versions a rule's sources were read at, or None when one of them is free text."""
    out = []
    for source in rule.sources:
        try:
            out.append(parse_version(source.version, scheme))
        except ValueError:
            return None
    return out


def open_ended(matrix: Matrix) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(engine, rule id, versions read) of rules with no upper version bound whose sources were all read before
    the engine's newest version: those that claim something, and those that answer ``unknown``."""
    from qcheck.matrix.resolve import bounded_above

    claims: list[tuple[str, str, str]] = []
    unknowns: list[tuple[str, str, str]] = []
    for engine in matrix.engines.values():
        newest = engine.parsed_versions[-1]
        for rule in engine.rules:
            if rule.verified is not None:
                continue  # it answers only where it was read: nothing to bound
            read = _read_at(rule, engine.scheme)
            if read and not bounded_above(rule) and max(read) < newest:
                shown = ", ".join(dict.fromkeys(s.version for s in rule.sources))
                (unknowns if rule.status == "unknown" else claims).append((engine.id, rule.id, shown))
    return claims, unknowns


def audit(matrix: Matrix) -> Audit:
    """Resolve every combination; raises MatrixDataError on the first ambiguous pair of rules."""
    result = Audit()
    result.open_ended, result.open_unknown = open_ended(matrix)
    targets = [Target(label=a.id, arch=a, cc=cc) for a in matrix.gpus.archs.values() for cc in (a.ccs or (None,))]
    for engine in matrix.engines.values():
        missing = sum(r.verified is None for r in [*engine.rules, *(k.rule for k in engine.kv_rules),
                                                   *(a.rule for a in engine.attention_rules),
                                                   *(s.rule for s in engine.kv_scale_rules)])
        if missing:
            result.unverified[engine.id] = missing
        backends: list[str | None] = [None, *engine.backends]
        gated = any(r.gate for r in engine.rules)
        by_id = {r.id: r for r in engine.rules if r.verified is None}
        for version in engine.versions:
            asked = parse_version(version, engine.scheme)
            for backend in backends:
                request = EngineRequest(engine, version, backend)
                for probe in PROBES:
                    inspection = probe.build()
                    for target in targets if engine.needs_gpu else [None]:
                        if backend is not None and target is not None and \
                                target.vendor not in engine.backends[backend].vendors:
                            continue
                        v = resolve_one(matrix, inspection, request, target, dimensions=False)
                        if gated:
                            _check_gates(engine, inspection, asked, target, backend, probe.label)
                        result.cells += 1
                        result.statuses[v.status] += 1
                        if v.status == "unknown" and not v.reasons:
                            result.unexplained.append(v)
                        if v.rule_id == "not-read":
                            result.not_read[(engine.id, version)] += 1
                        elif v.rule_id is None:
                            result.unsourced.append((engine.id, version, backend, v.arch, probe.label))
                        elif v.rule_id.split("+")[0] in by_id:
                            read = _read_at(by_id[v.rule_id.split("+")[0]], engine.scheme)
                            if read is not None and asked not in read:
                                result.borrowed[(engine.id, version)] += 1
    return result


def _check_gates(engine: Engine, inspection: Inspection, at: Version, target: Target | None, backend: str | None,
                 label: str) -> None:
    """A gate read at ``at`` refuses this probe, yet the rule read there that decides it (gates aside) runs it and is at
    least as specific as the gate: it contradicts what the code shows (matrices/SCHEMA.md §2.3',
    ``contradicts-generated``). A less specific rule is about a wider case that the gate refines."""
    from qcheck.matrix.rules import decide, matching_rules, pick_backend, read_at

    picked, _ = pick_backend(engine, backend, target)
    if target is not None and target.vendor not in engine.hardware:
        return
    held = [(r, t) for r, t in matching_rules(engine, inspection, at, target, picked) if read_at(r, at)]
    gates = [r for r, _ in held if r.gate]
    if not gates:
        return
    winners = decide(engine, [(r, t) for r, t in held if not r.gate])
    # a gate more specific than the rule refines it (the rule is about a wider case); one that is not contradicts it
    if winners and winners[0][0].status in ("native", "fallback") \
            and winners[0][0].specificity >= max(g.specificity for g in gates):
        rule = winners[0][0]
        where = f"{target.arch.id} {target.sm or ''}".strip() if target else "the provider"
        raise MatrixDataError(rule.file, "contradicts-generated",
                              f"at {engine.name} {at} the rule says {rule.status} for {label} on {where}, but "
                              f"{gates[0].label} ({'generated' if gates[0].generated else 'hand-written'} gate, read "
                              f"at {gates[0].verified.label if gates[0].verified else '?'}) refuses it: "
                              f"{gates[0].reasons[0] if gates[0].reasons else ''}", rule=rule.label)
