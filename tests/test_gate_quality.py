"""The quality part of ``qcheck gate``: a real eval (tiny transformers Llama as the reference, its real
GGUF exports as candidates), gated by the policy's thresholds; JUnit gets one case per threshold.

Run in-process (one torch import for the module); the CLI path of ``gate`` is covered by test_gate.py.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser
import pytest

from support.gate_helpers import TEST_MATRIX, qcheck

pytest.importorskip("torch")
pytest.importorskip("transformers")

from qcheck.gate import run_gate
from qcheck.matrix import load_matrix
from qcheck.policy import load_policy
from qcheck.report import junit, markdown, text
from support.contract import validate
from support.eval_helpers import task_file, tiny_gguf, tiny_reference


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quality")
    shutil.copytree(tiny_reference(), root / "ref")
    shutil.copy(tiny_gguf("Q8_0"), root / "q8.gguf")
    shutil.copy(tiny_gguf("Q4_0"), root / "q4.gguf")
    shutil.copy(task_file(), root / "tasks.jsonl")
    return root


POLICY = """models = ["q8.gguf", "q4.gguf"]
[[targets]]
engine = "tinycpp"
gpu = "cpu"
[quality]
reference = "ref"
tasks = ["tasks.jsonl"]
cache-dir = "cache"
max-length = 64
"""


def _run(project: Path, text: str, monkeypatch):
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    (project / "qcheck.toml").write_text(text)
    return run_gate(load_policy(project / "qcheck.toml"), matrix=load_matrix(TEST_MATRIX))


def test_policy_windows_reach_the_eval(project, monkeypatch):
    """`stride` and `windows` in [quality] are what the eval runs with (settings in the gate's JSON)."""
    result = _run(project, POLICY.replace("max-length = 64", "max-length = 32\nstride = 8\nwindows = \"chunks\"")
                  + "max-kld = 5.0\n", monkeypatch)
    settings = result.quality["eval"]["settings"]
    assert (settings["max_length"], settings["stride"], settings["windows"]) == (32, 8, "chunks")


def test_quality_gate_pass_and_fail(project, monkeypatch):
    result = _run(project, POLICY + "max-kld = 5.0\nmin-top1 = 0.1\n", monkeypatch)
    assert result.exit_code == 0, result.quality
    ev = result.quality["eval"]
    assert [c["name"] for c in ev["candidates"]] == ["q8.gguf", "q4.gguf"]
    q8, q4 = (c["metrics"]["kld_mean"] for c in ev["candidates"])
    assert 0 <= q8 < q4  # 8-bit loses less than 4-bit
    # a threshold between the two: Q8_0 passes, Q4_0 fails -> exit 1, one failing JUnit case
    result = _run(project, POLICY + f"max-kld = {(q8 + q4) / 2}\n", monkeypatch)
    assert result.exit_code == 1
    data = json.loads(json.dumps(result.to_json()))
    validate(data, "gate")
    assert data["summary"]["quality_failed"] is True and data["summary"]["failing"] == 0
    assert data["quality"]["eval"]["cache"]["hit"] is True  # the reference was computed once
    xml = junitparser.JUnitXml.fromstring(junit.render(result).split("\n", 1)[1])
    quality = [(c.classname, c.name, c.is_passed) for s in xml if s.name == "qcheck gate quality" for c in s]
    assert [(cls, ok) for cls, _, ok in quality] == [("quality.q8.gguf", True), ("quality.q4.gguf", False)]
    assert all(name.startswith("max-kld ") for _, name, _ in quality)
    ET.fromstring(junit.render(result).split("\n", 1)[1])
    assert "| q4.gguf |" in markdown.render(result) and "❌ **fail**" in markdown.render(result)
    human = text.render(result)
    assert "\nquality:\n" in human and "quality FAILED: gate FAILED (exit 1)" in human


def test_a_missing_reference_stops_the_gate_before_any_model_is_read(project):
    """The policy is checked in full first: a reference that does not exist is one line naming the key, not a
    finding after every compatibility check (it was QC122 in the report, after the models were judged)."""
    (project / "qcheck.toml").write_text(POLICY.replace('reference = "ref"', 'reference = "no-such-ref"')
                                         + 'tier = "good"\n')
    proc = qcheck("gate", "--format", "sarif", cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("qcheck: error: qcheck.toml: quality.reference: 'no-such-ref': no such directory, "
                                   "and not a Hub repo id")


@pytest.mark.parametrize(("extra", "key", "problem"), [
    ("max-kld = inf\n", "quality.max-kld", "threshold max-kld=inf is not a finite number"),
    ("max-kld = 1e309\n", "quality.max-kld", "threshold max-kld=inf is not a finite number"),
    ("max-ppl-ratio = -inf\n", "quality.max-ppl-ratio", "threshold max-ppl-ratio=-inf is not a finite number"),
    ("min-top1 = nan\n", "quality.min-top1", "threshold min-top1=nan is not a finite number"),
    ("min-recovery = 1.7976931348623157e308\nmax-kld = 0.1\n", None, None),  # finite: accepted
])
def test_every_threshold_is_finite_before_the_eval_runs(project, extra, key, problem):
    (project / "qcheck.toml").write_text(POLICY.replace('tasks = ["tasks.jsonl"]', 'tasks = ["missing.jsonl"]')
                                         + extra)
    proc = qcheck("gate", cwd=project)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if key is None:  # the thresholds pass; the task file is the next thing checked, still before any model
        assert "qcheck.toml: quality.tasks: --tasks missing.jsonl: no such file" in proc.stderr
    else:
        assert proc.stderr.strip().startswith(f"qcheck: error: qcheck.toml: {key}: {problem}")


def test_a_bad_task_file_stops_the_gate_before_any_model_is_read(project):
    (project / "bad.jsonl").write_text('{"id": "a", "kind": "text", "text": "ok"}\n{"id": "b", "kind": "choice"\n')
    (project / "qcheck.toml").write_text(POLICY.replace('tasks = ["tasks.jsonl"]', 'tasks = ["bad.jsonl"]')
                                         + "max-kld = 0.1\n")
    proc = qcheck("gate", "--format", "json", cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qcheck: error: qcheck.toml: quality.tasks: ")
    assert "bad.jsonl:2" in lines[0]


def test_a_quality_gate_that_cannot_run_is_exit_2_in_the_report(project):
    """What only the run can find (here every model fails to load) is still a QC122 finding in the report."""
    (project / "broken.gguf").write_bytes(b"GGUF" + b"\xff" * 20)
    (project / "qcheck.toml").write_text(POLICY.replace('models = ["q8.gguf", "q4.gguf"]', 'models = ["broken.gguf"]')
                                         + 'tier = "good"\n')
    proc = qcheck("gate", "--format", "sarif", cwd=project)
    assert proc.returncode == 2
    assert '"ruleId": "QC122"' in proc.stdout
    assert "quality: no local model could be evaluated" in proc.stdout


@pytest.mark.parametrize("flag", [["--max-kld", "inf"], ["--max-kld", "1e309"], ["--min-top1", "nan%"]])
def test_qcheck_eval_refuses_a_threshold_flag_that_is_not_finite_before_any_work(project, flag):
    proc = qcheck("eval", "-r", "ref", "-t", "tasks.jsonl", *flag, cwd=project)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().endswith("is not a finite number; leave it out to not check that metric")
    assert "computing the reference" not in proc.stderr
