"""Share of `unknown` cells per engine over the whole matrix (every probe x version x backend x arch).

Run: PYTHONPATH=. python matrices/tools/unknown_share.py  [--newest] [--arch a,b,...]
The same cells `qcheck matrix --validate` resolves; `--newest` counts only each engine's newest version;
`--arch` restricts the architectures (to compare data versions over the same cells).
"""

from __future__ import annotations

import sys
from collections import Counter

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.probes import PROBES
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import Target


def shares(newest_only: bool = False, archs: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """engine id -> (unknown cells, all cells)."""
    matrix = load_matrix()
    targets = [Target(label=a.id, arch=a, cc=cc) for a in matrix.gpus.archs.values() for cc in (a.ccs or (None,))
               if archs is None or a.id in archs]
    out: dict[str, tuple[int, int]] = {}
    for engine in matrix.engines.values():
        counts: Counter[str] = Counter()
        versions = engine.versions[-1:] if newest_only else engine.versions
        for version in versions:
            request = EngineRequest(engine, version, None)
            for probe in PROBES:
                inspection = probe.build()
                for target in targets if engine.needs_gpu else [None]:
                    if target is not None and target.vendor not in engine.hardware:
                        continue
                    counts[resolve_one(matrix, inspection, request, target).status] += 1
        out[engine.id] = (counts["unknown"], sum(counts.values()))
    return out


def main(argv: list[str]) -> int:
    archs = None
    if "--arch" in argv:
        archs = set(argv[argv.index("--arch") + 1].split(","))
    table = shares("--newest" in argv, archs)
    total_u = sum(u for u, _ in table.values())
    total = sum(n for _, n in table.values())
    for engine, (u, n) in sorted(table.items()):
        print(f"{engine:14} {u:5}/{n:<5} {100 * u / max(n, 1):5.1f}% unknown")
    print(f"{'all':14} {total_u:5}/{total:<5} {100 * total_u / total:5.1f}% unknown")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
