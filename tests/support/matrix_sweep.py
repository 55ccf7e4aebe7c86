"""The matrix sweeps' engine: which rule ties the resolver would meet over many checkpoints x engines x versions
x backends x GPUs, without building the verdicts.

``resolve_one`` raises ``MatrixDataError`` (ambiguous-rules) only in ``decide``, after the hardware and backend
gates; building a verdict's texts, sources and modifiers costs as much again and cannot raise. So the sweeps
run the same gates and the same ``matching_rules`` + ``decide`` on the same combinations, with the rules that
cannot hold at a (version, backend, GPU) filtered out once instead of once per checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qcheck.matrix.resolve import decide, matching_rules, pick_backend, select_version
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.matrix.versions import contains
from qcheck.model import Inspection


def rule_ties(matrix: Any, probes: Mapping[str, Sequence[Inspection]], targets: Iterable[Target], *,
              every_version: bool = True) -> tuple[set[str], int]:
    """(the ambiguous-rules errors met, the number of (probe, engine, version, backend, GPU) combinations
    decided) for ``probes`` (method -> inspections) on every engine and backend, at every version the data
    names (or the newest), on every target (or none, for providers)."""
    errors: set[str] = set()
    decided = 0
    targets = list(targets)
    for engine in matrix.engines.values():
        backend_names: list[str | None] = [None, *engine.backends] if engine.backends else [None]
        for version in engine.versions if every_version else [None]:
            _, at, _ = select_version(engine, version)
            for backend_name in backend_names:
                for target in targets if engine.needs_gpu else [None]:
                    if target is not None and target.vendor not in engine.hardware:
                        continue  # resolve_one answers "unsupported" before any rule
                    backend, problem = pick_backend(engine, backend_name, target)
                    if problem is not None:
                        continue
                    for method, inspections in probes.items():
                        rules = [r for r in engine.rules_for(method)
                                 if (r.versions is None or contains(r.versions, at))
                                 and (r.backends is None or (backend is not None and backend.name in r.backends))
                                 and (not r.hardware or (target is not None
                                                         and all(h.test(target) for h in r.hardware)))]
                        decided += len(inspections)
                        if not rules:
                            continue
                        for probe in inspections:
                            try:
                                decide(engine, matching_rules(engine, probe, at, target, backend, rules))
                            except MatrixDataError as exc:
                                errors.add(str(exc))
    return errors, decided
