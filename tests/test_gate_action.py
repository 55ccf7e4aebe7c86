"""The composite GitHub Action (action.yml): its structure, no input spliced into a script, and its gate
step's real bash script run locally against a project (with $GITHUB_OUTPUT and $GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from support.gate_helpers import PY, env, malformed_safetensors, q4_gguf

ROOT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())


def test_action_shape_and_no_script_injection():
    assert ACTION["runs"]["using"] == "composite"
    inputs = set(ACTION["inputs"])
    assert {"policy", "extras", "junit", "sarif", "markdown", "upload-sarif"} <= inputs
    assert "version" not in inputs  # qcheck is not on PyPI (the name there is another project's)
    install = next(s for s in ACTION["runs"]["steps"] if s.get("name") == "Install qcheck")
    assert install["env"]["QCHECK_ACTION_PATH"] == "${{ github.action_path }}"
    assert 'pip install --disable-pip-version-check "${QCHECK_ACTION_PATH}${extras}"' in install["run"]
    steps = ACTION["runs"]["steps"]
    text = (ROOT / "action.yml").read_text()
    for used in re.findall(r"inputs\.([a-z-]+)", text):
        assert used in inputs, used
    for step in steps:
        if "run" in step:
            assert step["shell"] == "bash"
            assert "${{" not in step["run"], step["name"]  # inputs arrive through env only
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif"))
    assert upload["if"].startswith("always()") and "inputs.upload-sarif == 'true'" in upload["if"]
    assert set(ACTION["outputs"]) >= {"exit-code", "sarif", "junit"}


def _gate_script() -> str:
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "gate")
    return step["run"]


@pytest.mark.parametrize("broken, code", [(False, "0"), (True, "2")])
def test_gate_step_script_runs_and_reports_the_exit_code(tmp_path, broken, code):
    q4_gguf(tmp_path / "q4.gguf")
    models = '["q4.gguf"]'
    if broken:
        malformed_safetensors(tmp_path / "bad.safetensors")
        models = '["q4.gguf", "bad.safetensors"]'
    (tmp_path / "ci.toml").write_text(f'models = {models}\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n')
    out, summary = tmp_path / "gh-output", tmp_path / "gh-summary"
    e = env(QCHECK_POLICY="ci.toml", QCHECK_JUNIT="reports dir/j.xml", QCHECK_SARIF="q.sarif", QCHECK_MARKDOWN="",
            QCHECK_ANNOTATIONS="true", GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary))
    (tmp_path / "reports dir").mkdir()
    e["PATH"] = f"{Path(PY).parent}{os.pathsep}{e['PATH']}"  # the venv's qcheck, as pip install puts it on PATH
    proc = subprocess.run(["bash", "-c", _gate_script()], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr  # the step itself never fails: the last step exits with the code
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert outputs == {"exit-code": code, "junit": "reports dir/j.xml", "sarif": "q.sarif", "markdown": ""}
    assert (tmp_path / "reports dir" / "j.xml").read_text().startswith("<?xml")
    assert summary.read_text().startswith("### qcheck gate: ")
    if broken:
        assert "::error file=bad.safetensors," in proc.stdout
