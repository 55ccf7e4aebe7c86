"""Verdicts for engines x GPUs: each combination resolved by the matrix rules, then, when it is not native,
completed with the nearest combinations that do run it.

The driver above the two steps it joins: ``qcheck.matrix.resolve`` (one combination) and
``qcheck.matrix.suggest`` (which itself resolves alternatives), so neither imports the other back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qcheck.matrix.resolve import EngineRequest, resolve_with_types
from qcheck.matrix.rules import dedupe
from qcheck.matrix.schema import Target
from qcheck.matrix.suggest import MAX_SUGGESTIONS, suggest

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection, Verdict
    from qcheck.request import Deploy


def resolve(matrix: Matrix, inspection: Inspection, requests: list[EngineRequest], targets: list[Target],
            *, suggestions: bool = True, skip_foreign: bool = False,
            deploy: Deploy | None = None) -> list[Verdict]:
    """Verdicts for the cross product of engines and GPUs (providers once each: they take no GPU).

    ``deploy`` is how it is deployed (KV-cache types, parallel sizes, engine knobs), which the dimensions judge.

    ``skip_foreign`` leaves out the combinations whose GPU vendor the engine does not run on at all (used
    when the engines were implied by ``--gpu`` alone rather than named).
    """
    out: list[Verdict] = []
    for request in requests:
        combos: list[Target | None] = list(targets) if request.engine.needs_gpu else [None]
        for target in combos:
            if skip_foreign and target is not None and target.vendor not in request.engine.hardware:
                continue
            verdict, types = resolve_with_types(matrix, inspection, request, target, deploy)
            if suggestions and verdict.status != "native":
                # the deciding dimension's own suggestions (e.g. the first version that loads the architecture)
                # lead; the matrix's nearest working combinations follow
                found = suggest(matrix, inspection, verdict, request, target, types=types, deploy=deploy)
                verdict.suggestions = dedupe([*verdict.suggestions, *found])[:max(MAX_SUGGESTIONS,
                                                                                   len(verdict.suggestions))]
            out.append(verdict)
    return out
