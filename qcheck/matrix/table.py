"""``qcheck matrix``: the engine x architecture table of statuses for a method or a checkpoint.

Every cell is a real resolution (the same matcher as ``qcheck check``) of a representative
checkpoint (``probes.py``) or of the user's own inspection, so the table can never disagree with
``check``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import Target
from qcheck.request import Deploy, KVCacheTypes

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection, Judgement, Verdict

MATRIX_SCHEMA = "qcheck.matrix/1"
HOSTED = "hosted"


@dataclass
class MatrixRow:
    engine: str
    name: str
    version: str
    backend: str | None
    kind: str
    #: column id -> verdict (missing: not applicable, e.g. a provider on a GPU column)
    cells: dict[str, Verdict] = field(default_factory=dict)

    @property
    def label(self) -> str:
        backend = f":{self.backend}" if self.backend else ""
        return f"{self.engine}{backend} {self.version}"


@dataclass
class MatrixTable:
    title: str
    method: str
    inspection: Inspection
    columns: list[str]
    rows: list[MatrixRow]


@dataclass
class MatrixResult:
    """The result of ``qcheck matrix`` (kind "matrix"): tables plus the data needed for the docs page."""

    tables: list[MatrixTable]
    matrix: Matrix
    kind: str = "matrix"
    exit_code: int = 0
    #: text output as a one-line-per-variant overview (``qcheck matrix`` with no method or checkpoint)
    overview: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": MATRIX_SCHEMA,
            "tables": [
                {
                    "title": t.title, "method": t.method, "columns": t.columns,
                    "quantization": t.inspection.to_json()["quantization"],
                    "rows": [
                        {"engine": r.engine, "engine_version": r.version, "backend": r.backend, "kind": r.kind,
                         "cells": {col: {"status": v.status, "kernel": v.kernel, "requires": v.requires,
                                         "backend": v.backend, "rule_id": v.rule_id}
                                   for col, v in r.cells.items()}}
                        for r in t.rows
                    ],
                }
                for t in self.tables
            ],
            "exit_code": self.exit_code,
        }


def column_targets(matrix: Matrix, gpus: list[str] | None = None) -> list[Target]:
    """The columns: the named GPUs/archs, or every architecture (vendor by vendor, oldest first)."""
    if gpus:
        return list({t.label: t for t in (matrix.gpus.lookup(g) for g in gpus)}.values())
    return [Target(label=a.id, arch=a, cc=a.cc) for a in matrix.gpus.archs.values()]


def expand_requests(matrix: Matrix, requests: list[EngineRequest] | None, all_versions: bool) -> list[EngineRequest]:
    """Rows: the requested engines (default every engine), at their newest version or at every version."""
    base = requests or [EngineRequest(e) for e in matrix.engines.values()]
    out: list[EngineRequest] = []
    for r in base:
        if all_versions and r.version is None:
            out.extend(EngineRequest(r.engine, v, r.backend) for v in r.engine.versions)
        else:
            out.append(r)
    return out


def build_table(matrix: Matrix, inspection: Inspection, title: str, requests: list[EngineRequest],
                targets: list[Target], *, probe: bool = False) -> MatrixTable:
    """One table: a row per engine request, a cell per target (providers get one ``hosted`` column). A ``probe``
    (a synthetic format variant, no model in particular) is judged on its weight format alone."""
    rows: list[MatrixRow] = []
    columns = [t.label for t in targets]
    has_provider = False
    for request in requests:
        version = request.version or request.engine.newest
        row = MatrixRow(request.engine.id, request.engine.name, version, request.backend, request.engine.kind)
        if request.engine.needs_gpu:
            for target in targets:
                row.cells[target.label] = resolve_one(matrix, inspection, request, target, dimensions=not probe)
        else:
            has_provider = True
            row.cells[HOSTED] = resolve_one(matrix, inspection, request, None, dimensions=not probe)
        rows.append(row)
    if has_provider:
        columns.append(HOSTED)
    return MatrixTable(title, inspection.quantization.method, inspection, columns, rows)


def build_matrix(matrix: Matrix, *, method: str | None = None, inspection: Inspection | None = None,
                 requests: list[EngineRequest] | None = None, gpus: list[str] | None = None,
                 all_versions: bool = False) -> MatrixResult:
    """Tables for one checkpoint, for every probe of one method, or for every probe of every method."""
    from qcheck.errors import UsageError
    from qcheck.matrix.probes import probes_for
    from qcheck.matrix.schema import METHODS

    targets = column_targets(matrix, gpus)
    rows = expand_requests(matrix, requests, all_versions)
    if inspection is not None:
        return MatrixResult([build_table(matrix, inspection, inspection.path, rows, targets)], matrix)
    if method is not None and method not in METHODS:
        import difflib

        close = difflib.get_close_matches(method, METHODS, n=3)
        hint = f"; did you mean: {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown method {method!r}{hint} (known: {', '.join(METHODS)})")
    tables = [build_table(matrix, p.build(), p.label, rows, targets, probe=True) for p in probes_for(method)]
    return MatrixResult(tables, matrix)


def kv_grid(matrix: Matrix, targets: list[Target]) -> list[tuple[str, str, dict[str, Judgement | None]]]:
    """Every engine's ruled KV-cache dtypes judged on each target at its newest version, for the docs page:
    (engine label, dtype, column -> judgement; None where the engine does not run on the target's vendor)."""
    from qcheck.matrix.deployment import Deployment
    from qcheck.matrix.kvcache import judge_kv_cache
    from qcheck.matrix.resolve import select_version
    from qcheck.model import Inspection, Quantization

    probe = Inspection(path="kv", container="safetensors", dtype="bfloat16", quantization=Quantization(method="none"))
    out: list[tuple[str, str, dict[str, Judgement | None]]] = []
    for engine in matrix.engines.values():
        if engine.kv_cache is None or not engine.needs_gpu:
            continue
        request = EngineRequest(engine)
        version, at, _ = select_version(engine, None)
        ruled = {d for r in engine.kv_rules for d in r.pair.mentioned}
        pairs = [(d, d) for d in engine.kv_cache.accepts if d in ruled] + list(engine.kv_cache.shown_pairs)
        for k, v in pairs:
            cells: dict[str, Judgement | None] = {}
            for target in targets:
                cells[target.label] = None if target.vendor not in engine.hardware else judge_kv_cache(
                    Deployment(matrix, probe, request, target, version, at, Deploy(kv_cache=KVCacheTypes(k, v))))
            if any(j is not None for j in cells.values()):  # an unquantised pair no rule names says nothing
                out.append((f"{engine.id} {version}", k if k == v else f"K {k}, V {v}", cells))
    return out
