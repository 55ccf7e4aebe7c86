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
from qcheck.matrix.schema import Target
from qcheck.matrix.versions import parse_version

if TYPE_CHECKING:
    from packaging.version import Version

    from qcheck.matrix.loader import Matrix
    from qcheck.matrix.schema import Rule
    from qcheck.model import Verdict


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
    #: (engine, version) -> cells there decided by a rule none of whose sources was read at that version
    borrowed: Counter = field(default_factory=Counter)

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
        backends: list[str | None] = [None, *engine.backends]
        by_id = {r.id: r for r in engine.rules}
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
                        result.cells += 1
                        result.statuses[v.status] += 1
                        if v.status == "unknown" and not v.reasons:
                            result.unexplained.append(v)
                        if v.rule_id is None:
                            result.unsourced.append((engine.id, version, backend, v.arch, probe.label))
                        elif v.rule_id.split("+")[0] in by_id:
                            read = _read_at(by_id[v.rule_id.split("+")[0]], engine.scheme)
                            if read is not None and asked not in read:
                                result.borrowed[(engine.id, version)] += 1
    return result
