"""GitHub workflow-command annotations: escaping with hostile strings, the 10-per-level cap, the summary."""

from __future__ import annotations

import re

import pytest

from qcheck.report import github
from qcheck.report.findings import RULES, Finding
from support.gate_helpers import TEST_MATRIX, fp8_dir, malformed_safetensors, q4_gguf, qcheck


def _unescape(text: str) -> str:
    """What the Actions runner does to command data (actions/runner ActionCommand.Unescape)."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


@pytest.mark.parametrize("raw, data, prop", [
    ("100% done", "100%25 done", "100%25 done"),
    ("line1\nline2\r\n", "line1%0Aline2%0D%0A", "line1%0Aline2%0D%0A"),
    ("a:b,c", "a:b,c", "a%3Ab%2Cc"),
    ("%0A literal", "%250A literal", "%250A literal"),
    ("::error::x", "::error::x", "%3A%3Aerror%3A%3Ax"),
])
def test_escaping_follows_the_workflow_command_rules(raw, data, prop):
    assert github.escape_data(raw) == data
    assert github.escape_property(raw) == prop
    assert _unescape(github.escape_property(raw)) == raw


def test_a_hostile_message_cannot_inject_a_command():
    evil = "bad tensor\n::add-mask::secret\r\n::set-env name=PATH::/tmp\n%0A::warning::fake"
    f = Finding(RULES["QC130"], "warning", evil, "models/x,y:z.gguf", artifact="models/x,y:z.gguf",
                logical="blk.0\n::error::", title="t,i:t%le")
    line = github.annotation(f)
    assert "\n" not in line and "\r" not in line
    m = re.fullmatch(r"::warning (?P<props>[^:]*)::(?P<data>.*)", line)
    assert m, line
    props = dict(p.split("=", 1) for p in m["props"].split(","))
    assert _unescape(props["file"]) == "models/x,y:z.gguf"
    assert _unescape(props["title"]) == "qcheck QC130 t,i:t%le"
    assert _unescape(m["data"]) == f"{evil} [blk.0\n::error::]"


def _finding(rule: str, level: str, i: int) -> Finding:
    return Finding(RULES[rule], level, f"{rule} number {i}", f"m{i}.gguf", artifact=f"m{i}.gguf")


def test_at_most_ten_errors_most_severe_first():
    findings = ([_finding("QC111", "error", i) for i in range(8)] + [_finding("QC110", "error", i) for i in range(8)]
                + [_finding("QC100", "error", 0)] + [_finding("QC112", "warning", i) for i in range(12)]
                + [_finding("QC113", "note", i) for i in range(3)])
    lines = github.workflow_annotations(findings)
    errors = [line for line in lines if line.startswith("::error ")]
    warnings = [line for line in lines if line.startswith("::warning ")]
    assert len(errors) == 10 and len(warnings) == 10
    assert "QC100" in errors[0]  # could not judge: the most severe
    assert all("QC110" in e for e in errors[1:9])  # then every unsupported
    assert all("QC111" in e for e in errors[9:])  # unknowns fill what is left
    assert lines[-1] == ("::notice title=qcheck::9 more finding(s) not annotated: see the step summary or "
                         "the JSON/SARIF report")  # 7 errors + 2 warnings dropped


def test_cli_github_annotations_and_step_summary(tmp_path):
    q4_gguf(tmp_path / "q4.gguf")
    fp8_dir(tmp_path / "fp8")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    proc = qcheck("check", "fp8", "--engine", "fastserve", "--gpu", "cpu", "--gpu", "a100", "--github",
                  cwd=tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    assert proc.returncode == 1, proc.stderr
    annotations = [line for line in proc.stdout.splitlines() if line.startswith("::")]
    assert annotations[0].startswith("::error file=fp8/config.json,title=qcheck QC110 fastserve 0.33.0 x cpu%3A")
    assert any(a.startswith("::warning file=fp8/config.json,title=qcheck QC112") for a in annotations)
    assert "UNSUPPORTED" in proc.stdout  # the human text is still there
    text = summary.read_text()
    assert text.startswith("earlier step\n### qcheck check: ❌ fail")  # appended, not replaced
    assert "| fp8 | fastserve 0.33.0 | a100 | 🟡 fallback |" in text
    # --format github alone: annotations only, same exit code
    proc2 = qcheck("check", "fp8", "--engine", "fastserve", "--gpu", "cpu", "--format", "github", cwd=tmp_path)
    assert proc2.returncode == 1
    assert proc2.stdout.splitlines()[0].startswith("::error ")


def test_cli_github_for_an_unjudged_file_in_a_gate(tmp_path):
    malformed_safetensors(tmp_path / "bad.safetensors")
    q4_gguf(tmp_path / "q4.gguf")
    (tmp_path / "qcheck.toml").write_text('models = ["*.safetensors", "*.gguf"]\n[[targets]]\nengine = "tinycpp"\n'
                                          'gpu = ["cpu"]\n')
    proc = qcheck("gate", "--format", "github", cwd=tmp_path)
    assert proc.returncode == 2
    first = proc.stdout.splitlines()[0]
    assert first.startswith("::error file=bad.safetensors,title=qcheck QC100 The model could not be judged::")
    assert str(TEST_MATRIX) not in proc.stdout


def test_annotation_paths_are_relative_to_the_workspace(tmp_path):
    """The Action runs in `working-directory` (a subfolder): annotations must name files from the repo root."""
    work = tmp_path / "repo" / "models"
    work.mkdir(parents=True)
    fp8_dir(work / "fp8")
    args = ("check", "fp8", "--engine", "fastserve", "--gpu", "cpu", "--format", "github")
    proc = qcheck(*args, cwd=work, GITHUB_WORKSPACE=str(tmp_path / "repo"))
    assert proc.stdout.splitlines()[0].startswith("::error file=models/fp8/config.json,"), proc.stdout
    # outside a workflow: relative to the current directory, as before
    proc = qcheck(*args, cwd=work, GITHUB_WORKSPACE="")
    assert proc.stdout.splitlines()[0].startswith("::error file=fp8/config.json,"), proc.stdout


def test_file_property_keeps_paths_outside_the_workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "repo"))
    monkeypatch.chdir(tmp_path)
    assert github._file_property("repo/a/m.gguf") == "a/m.gguf"
    assert github._file_property(str(tmp_path / "repo" / "m.gguf")) == "m.gguf"
    assert github._file_property("other/m.gguf") == "other/m.gguf"  # outside: as named
    assert github._file_property("/elsewhere/m.gguf") == "/elsewhere/m.gguf"
