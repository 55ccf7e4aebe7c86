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

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Verdict


@dataclass
class Audit:
    cells: int = 0
    statuses: Counter = field(default_factory=Counter)
    #: (engine, version, backend, arch, probe label) of cells that have no sourced rule at all
    unsourced: list[tuple[str, str, str | None, str | None, str]] = field(default_factory=list)
    #: verdicts whose status is unknown but that carry no reason (must stay empty)
    unexplained: list[Verdict] = field(default_factory=list)

    def summary(self) -> str:
        parts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        return f"{self.cells} cells: {parts}; {len(self.unsourced)} without a sourced rule"


def audit(matrix: Matrix) -> Audit:
    """Resolve every combination; raises MatrixDataError on the first ambiguous pair of rules."""
    result = Audit()
    targets = [Target(label=a.id, arch=a, cc=cc) for a in matrix.gpus.archs.values() for cc in (a.ccs or (None,))]
    for engine in matrix.engines.values():
        backends: list[str | None] = [None, *engine.backends]
        for version in engine.versions:
            for backend in backends:
                request = EngineRequest(engine, version, backend)
                for probe in PROBES:
                    inspection = probe.build()
                    for target in targets if engine.needs_gpu else [None]:
                        if backend is not None and target is not None and \
                                target.vendor not in engine.backends[backend].vendors:
                            continue
                        v = resolve_one(matrix, inspection, request, target)
                        result.cells += 1
                        result.statuses[v.status] += 1
                        if v.status == "unknown" and not v.reasons:
                            result.unexplained.append(v)
                        if v.rule_id is None:
                            result.unsourced.append((engine.id, version, backend, v.arch, probe.label))
    return result
