"""The verdict's dimensions (qcheck.matrix.dimensions): each dimension judges part of the deployment and the
worst one decides, naming itself in the reasons; the weight format alone reads exactly as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcheck.matrix import dimensions, resolve
from qcheck.matrix.dimensions import Deployment, combine, worst
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.resolve import parse_engine_spec, resolve_one
from qcheck.model import Inspection, Judgement, Quantization, Source, Verdict

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"


@pytest.fixture(scope="module")
def m():
    return load_matrix(TEST_MATRIX)


def st(method: str, **quant) -> Inspection:
    return Inspection(path="model", container="safetensors", dtype="bfloat16",
                      quantization=Quantization(method=method, **quant))


def _verdict(status: str, reasons: list[str]) -> Verdict:
    return Verdict(engine="e", engine_version="1", gpu=None, arch=None, compute_capability=None,
                   status=status, reasons=list(reasons))  # type: ignore[arg-type]


@pytest.mark.parametrize(("statuses", "expected"), [
    ([], "native"),
    (["native", "fallback"], "fallback"),
    (["fallback", "unknown", "native"], "unknown"),
    (["unknown", "unsupported"], "unsupported"),
    (["native"], "native"),
])
def test_worst_orders_unsupported_unknown_fallback_native(statuses, expected) -> None:
    assert worst(statuses) == expected


def test_a_worse_dimension_decides_and_names_itself() -> None:
    v = _verdict("native", ["fp8 runs natively"])
    arch = Judgement("architecture", "unsupported", ["Foo is not registered in e 1"],
                     [Source("registry.py", "1")], ["e 2 loads Foo: --engine e==2"])
    combine(v, [arch])
    assert v.status == "unsupported"
    assert v.reasons == ["architecture: Foo is not registered in e 1", "weights: fp8 runs natively"]
    assert v.suggestions == ["e 2 loads Foo: --engine e==2"]
    assert [s.ref for s in v.sources] == ["registry.py"]
    assert [(d.dimension, d.status) for d in v.dimensions] == [("weights", "native"), ("architecture", "unsupported")]


def test_a_tie_keeps_the_weight_reasons_first_and_native_ties_add_nothing() -> None:
    v = _verdict("fallback", ["marlin"])
    combine(v, [Judgement("kv-cache", "fallback", ["fp8 kv emulated"])])
    assert (v.status, v.reasons) == ("fallback", ["marlin", "kv-cache: fp8 kv emulated"])
    v = _verdict("native", ["fine"])
    combine(v, [Judgement("architecture", "native", ["Foo is registered"])])
    assert (v.status, v.reasons) == ("native", ["fine"])
    assert v.dimensions[1].reasons == ["Foo is registered"]


def test_a_better_dimension_never_lifts_the_weight_verdict() -> None:
    v = _verdict("unsupported", ["no kernel"])
    combine(v, [Judgement("architecture", "native", ["registered"])])
    assert (v.status, v.reasons) == ("unsupported", ["no kernel"])


def test_registered_dimensions_run_in_resolve_and_reach_the_json(m, monkeypatch) -> None:
    seen: list[Deployment] = []

    def parallel(d: Deployment) -> Judgement | None:
        seen.append(d)
        if d.target is not None and d.target.arch.id == "hopper":
            return Judgement("parallelism", "unsupported", [f"TP=3 does not divide {d.inspection.path}'s heads"])
        return None

    monkeypatch.setattr(dimensions, "DIMENSIONS", [parallel])
    request = parse_engine_spec("fastserve", m)
    h100 = resolve_one(m, st("fp8", scale_granularity="block"), request, m.gpus.lookup("h100"))
    assert h100.status == "unsupported"
    assert h100.reasons[0] == "parallelism: TP=3 does not divide model's heads"
    assert seen[0].version == m.engine("fastserve").newest and seen[0].request is request
    data = h100.to_json()
    assert [d["dimension"] for d in data["dimensions"]] == ["weights", "parallelism"]
    assert data["dimensions"][0]["status"] == "native"
    # a dimension with nothing to say leaves the verdict as the weight format decided it
    l4 = resolve_one(m, st("fp8", scale_granularity="block"), request, m.gpus.lookup("l4"))
    assert (l4.status, [d.dimension for d in l4.dimensions]) == ("fallback", ["weights"])


def test_suggestions_of_the_deciding_dimension_lead(m, monkeypatch) -> None:
    def arch(d: Deployment) -> Judgement:
        return Judgement("architecture", "unsupported", ["Foo unknown"], suggestions=["upgrade to load Foo"])

    monkeypatch.setattr(dimensions, "DIMENSIONS", [arch])
    request = parse_engine_spec("fastserve", m)
    [v] = resolve(m, st("fp8", scale_granularity="block"), [request], [m.gpus.lookup("h100")])
    assert v.status == "unsupported"
    assert v.suggestions[0] == "upgrade to load Foo"
