"""The shipped matrix data (matrices/): valid, complete, sourced, and every cell explainable."""

from __future__ import annotations

import pytest

from qcheck.matrix.audit import audit
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.probes import PROBES
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import METHODS, Target
from qcheck.model import Inspection, Quantization
from support.matrix_sweep import rule_ties


@pytest.fixture(scope="module")
def shipped():
    return load_matrix()


@pytest.fixture(scope="module")
def report(shipped):
    return audit(shipped)


def test_shipped_data_loads(shipped) -> None:
    assert "vllm" in shipped.engines
    assert len(shipped.gpus.archs) >= 10 and len(shipped.gpus.gpus) >= 20


def test_every_cell_resolves_without_a_data_error(shipped, report) -> None:
    """Every (engine, version, backend, architecture, canonical method variant) gets a status."""
    archs = sum(max(1, len(a.ccs)) for a in shipped.gpus.archs.values())
    assert {p.method for p in PROBES} == set(METHODS)
    assert report.cells >= len(PROBES) * archs  # at least one engine's worth, nothing skipped silently
    assert sum(report.statuses.values()) == report.cells
    assert set(report.statuses) <= {"native", "fallback", "unsupported", "unknown"}


def test_every_shipped_rule_states_where_it_was_read(shipped, report) -> None:
    """qcheck matrix --validate refuses a rule without `verified` (issue #35); the shipped files have none left."""
    assert report.unverified == {}
    report.require_verified(shipped)
    assert all(e.rules_verified for e in shipped.engines.values())


def test_every_unknown_carries_a_reason(report) -> None:
    assert report.unexplained == []


def test_every_decided_cell_names_a_source_with_a_version(shipped) -> None:
    for engine in shipped.engines.values():
        for version in engine.versions:
            request = EngineRequest(engine, version)
            targets = [Target(a.id, a, a.cc) for a in shipped.gpus.archs.values()] if engine.needs_gpu else [None]
            for probe in PROBES:
                inspection = probe.build()
                for target in targets:
                    v = resolve_one(shipped, inspection, request, target)
                    if v.rule_id is not None:
                        assert v.sources, (engine.id, version, probe.label, v.arch, v.rule_id)
                        assert all(s.ref and s.version for s in v.sources)
                    if v.status in ("fallback",):
                        assert v.kernel, (engine.id, probe.label, v.arch, v.rule_id)


def test_every_engine_default_version_is_its_newest(shipped) -> None:
    for engine in shipped.engines.values():
        assert engine.newest == engine.versions[-1]
        assert list(engine.parsed_versions) == sorted(engine.parsed_versions)


def test_every_pair_of_gguf_types_resolves(shipped) -> None:
    """A GGUF file mixes tensor types freely: no pair of ggml types may make two rules clash (ambiguous-rules),
    on any engine, backend or architecture, at the newest version."""
    import itertools

    from gguf.constants import GGMLQuantizationType

    types = [t.name for t in GGMLQuantizationType]
    targets = [Target(a.id, a, cc) for a in shipped.gpus.archs.values() for cc in (a.ccs or (None,))]
    probes = [Inspection(path="x.gguf", container="gguf",
                         quantization=Quantization(method="gguf", tensor_types={x: 1, y: 1, "F32": 1}))
              for x, y in itertools.combinations(types, 2)]
    errors, decided = rule_ties(shipped, {"gguf": probes}, targets, every_version=False)
    assert sorted(errors) == []
    assert decided > len(probes) * len(targets)
