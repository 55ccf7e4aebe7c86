"""JUnit XML for check, gate and eval results, read back with junitparser and xml.etree."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import junitparser
import pytest

from qcheck.matrix import load_matrix
from qcheck.pipeline import run
from qcheck.report import junit
from qcheck.request import CheckRequest
from support.gate_helpers import TEST_MATRIX, fp8_dir, lfs_pointer, malformed_safetensors, q4_gguf


@pytest.fixture
def matrix(monkeypatch):
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    return load_matrix(TEST_MATRIX)


def _cases(xml_text: str, tmp_path) -> list[junitparser.TestCase]:
    path = tmp_path / "out.xml"
    path.write_text(xml_text, encoding="utf-8")
    xml = junitparser.JUnitXml.fromfile(str(path))
    return [case for suite in xml for case in suite]


def test_one_case_per_verdict_with_failures_carrying_the_reason(tmp_path, matrix):
    model = fp8_dir(tmp_path / "fp8")
    result = run(CheckRequest(str(model), ["fastserve", "tinycpp"], ["a100", "cpu"]), matrix)
    text = junit.render(result)
    cases = _cases(text, tmp_path)
    assert len(cases) == len(result.verdicts) == 4
    by_name = {c.name: c for c in cases}
    assert set(by_name) == {"fastserve 0.33.0 x a100", "fastserve 0.33.0 x cpu",
                            "tinycpp b10488 [cpu] x cpu", "tinycpp b10488 [cuda] x a100"}
    # fallback passes (native not required); the three unsupported cells fail with their reason
    assert by_name["fastserve 0.33.0 x a100"].is_passed
    failed = [c for c in cases if not c.is_passed]
    assert len(failed) == 3
    for case in failed:
        [failure] = case.result
        assert isinstance(failure, junitparser.Failure)
        assert failure.type == "unsupported"
        assert failure.message.startswith("unsupported: ")
        assert len(failure.message) > len("unsupported: ")
    assert all(c.classname == str(model) for c in cases)
    root = ET.fromstring(text.split("\n", 1)[1])
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "3", "0")


def test_require_native_turns_the_fallback_into_a_failure(tmp_path, matrix):
    model = fp8_dir(tmp_path / "fp8")
    result = run(CheckRequest(str(model), ["fastserve"], ["a100"], require_native=True), matrix)
    [case] = _cases(junit.render(result), tmp_path)
    [failure] = case.result
    assert failure.type == "fallback"
    assert "Marlin" in failure.text  # the kernel that would have run, in the details


def test_gate_models_not_judged_are_errors_and_skipped_pointers_are_skipped(tmp_path, matrix):
    from qcheck.gate import run_gate
    from qcheck.policy import load_policy

    q4_gguf(tmp_path / "m" / "q4.gguf")
    malformed_safetensors(tmp_path / "m" / "bad.safetensors")
    lfs_pointer(tmp_path / "m" / "big.gguf")
    policy_file = tmp_path / "qcheck.toml"
    policy_file.write_text('models = ["m/*"]\nlfs-pointers = "skip"\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n')
    result = run_gate(load_policy(policy_file), matrix=matrix)
    assert result.exit_code == 2
    xml = junitparser.JUnitXml.fromstring(junit.render(result).split("\n", 1)[1])
    suites = {s.name: s for s in xml}
    assert sorted(n.rsplit("/", 1)[-1] for n in suites) == ["bad.safetensors", "big.gguf", "q4.gguf"]
    assert all(n.startswith("qcheck gate ") for n in suites)
    results = {}
    for suite in xml:
        for case in suite:
            results[case.classname] = case
    bad = next(c for k, c in results.items() if k.endswith("bad.safetensors"))
    assert isinstance(bad.result[0], junitparser.Error)
    assert "header length" in bad.result[0].message
    big = next(c for k, c in results.items() if k.endswith("big.gguf"))
    assert isinstance(big.result[0], junitparser.Skipped)
    assert "Git LFS pointer" in big.result[0].message
    good = next(c for k, c in results.items() if k.endswith("q4.gguf"))
    assert good.is_passed and good.name == "tinycpp b10488 [cpu] x cpu"


def test_eval_one_case_per_candidate_and_threshold():
    data = {
        "schema": "qcheck.eval/1", "reference": {"path": "ref"}, "tasks": {"items": 3},
        "thresholds": {"max_kld": 0.01, "min_top1": 0.9, "max_accuracy_drop": 0.02, "tier": None,
                       "use_intervals": False},
        "candidates": [
            {"name": "q4", "path": "q4.gguf", "backend": "simulated", "metrics": {"kld_mean": 0.05},
             "gate": {"passed": False, "checked": ["max_kld", "min_top1"], "skipped": ["max_accuracy_drop"],
                      "failures": [{"threshold": "max_kld", "metric": "kld_mean", "value": 0.05, "limit": 0.01,
                                    "basis": "point", "message": "kld_mean 0.05 > max-kld 0.01"}]}},
            {"name": "q8", "path": "q8.gguf", "backend": "simulated", "metrics": {"kld_mean": 0.001},
             "gate": {"passed": True, "checked": ["max_kld", "min_top1"], "skipped": ["max_accuracy_drop"],
                      "failures": []}},
        ],
        "exit_code": 1,
    }
    xml = junitparser.JUnitXml.fromstring(junit.render(data).split("\n", 1)[1])
    cases = [(c.classname, c.name, c) for s in xml for c in s]
    assert len(cases) == 6
    outcome = {(cls, name): (type(c.result[0]).__name__ if c.result else "passed") for cls, name, c in cases}
    assert outcome == {
        ("quality.q4", "max-kld 0.01"): "Failure", ("quality.q4", "min-top1 0.9"): "passed",
        ("quality.q4", "max-accuracy-drop 0.02"): "Skipped",
        ("quality.q8", "max-kld 0.01"): "passed", ("quality.q8", "min-top1 0.9"): "passed",
        ("quality.q8", "max-accuracy-drop 0.02"): "Skipped",
    }
    failure = next(c for cls, name, c in cases if cls == "quality.q4" and name == "max-kld 0.01").result[0]
    assert failure.message == "kld_mean 0.05 > max-kld 0.01"


def test_hostile_strings_stay_well_formed_xml(tmp_path):
    hostile = 'tensor <a href="x">]]>&amp;\x00\x1b[31m\ud800 "quoted" \'single\''
    data = {"schema": "qcheck.check/1", "policy": {},
            "inspection": {"path": f"models/{hostile}.gguf", "container": "gguf", "quantization": {}},
            "verdicts": [{"engine": "e<1>", "engine_version": "1&2", "gpu": "g]]>", "arch": "x", "status": "unsupported",
                          "reasons": [hostile], "requires": [], "suggestions": [], "sources": [], "fails": True,
                          "outcome": {"fails": True, "because": ["unsupported"], "reasons": [hostile]}}],
            "exit_code": 1}
    text = junit.render(data)
    cases = _cases(text, tmp_path)  # junitparser (lxml or etree) accepts it
    [case] = cases
    [failure] = case.result
    assert "]]>&amp;" in failure.message  # escaped on the way out, intact on the way back
    assert "\x00" not in failure.message and "\ufffd" in failure.message
    assert case.name == "e<1> 1&2 x g]]>"


def test_check_cli_writes_every_report_and_keeps_its_exit_code(tmp_path):
    import json

    from support.gate_helpers import qcheck

    fp8_dir(tmp_path / "fp8")
    base = qcheck("check", "fp8", "--engine", "tinycpp", "--gpu", "cpu", cwd=tmp_path)
    proc = qcheck("check", "fp8", "--engine", "tinycpp", "--gpu", "cpu", "--junit", "c.xml", "--sarif", "c.sarif",
                  "--markdown", "c.md", "-o", "c.json", "--format", "json", cwd=tmp_path)
    assert base.returncode == proc.returncode == 1
    assert proc.stdout == ""  # the main output went to -o
    assert json.loads((tmp_path / "c.json").read_text())["exit_code"] == 1
    [case] = [c for s in junitparser.JUnitXml.fromfile(str(tmp_path / "c.xml")) for c in s]
    assert case.name == "tinycpp b10488 [cpu] x cpu" and not case.is_passed
    assert json.loads((tmp_path / "c.sarif").read_text())["runs"][0]["results"][0]["ruleId"] == "QC110"
    assert "❌ unsupported" in (tmp_path / "c.md").read_text()


def test_inspect_result_is_one_case():
    data = {"schema": "qcheck.inspection/1", "path": "m.gguf", "container": "gguf",
            "quantization": {"method": "gguf"}, "warnings": ["odd tensor"],
            "findings": [{"kind": "config-mismatch", "where": "blk.0.attn_q.weight", "message": "shape differs"}]}
    xml = junitparser.JUnitXml.fromstring(junit.render(data).split("\n", 1)[1])
    [case] = [c for s in xml for c in s]
    assert (case.classname, case.name, case.is_passed) == ("m.gguf", "inspect (gguf)", True)
    assert "config-mismatch: shape differs" in case.system_out
