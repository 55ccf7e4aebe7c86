"""SARIF 2.1.0 output, validated against the SARIF 2.1.0 JSON schema.

tests/data/sarif-schema-2.1.0.json is the OASIS SARIF 2.1.0 schema (the 2.1.0-rtm.5 release, the one
SchemaStore serves for "sarif-2.1.0") as shipped in the npm package @microsoft/jest-sarif 1.0.0-beta.0
(lib/schemas/sarif-2.1.0-rtm.5.json, MIT). Not written by us.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from qcheck import pipeline
from qcheck.matrix import load_matrix
from qcheck.report import sarif
from qcheck.report.findings import RULES
from qcheck.request import CheckRequest
from support.gate_helpers import (
    SARIF_SCHEMA,
    TEST_MATRIX,
    bf16_dir,
    lfs_pointer,
    malformed_safetensors,
    mxfp4_dir,
    q4_gguf,
)


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    return jsonschema.Draft4Validator(schema)


@pytest.fixture
def matrix(monkeypatch):
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    return load_matrix(TEST_MATRIX)


def _errors(validator, doc) -> list[str]:
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_schema_rejects_a_broken_log(validator):
    """The validator is live: a wrong level and a missing message are caught."""
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "qcheck"}},
                                         "results": [{"ruleId": "QC110", "level": "fatal"}]}]}
    errors = _errors(validator, doc)
    assert errors and any("fatal" in e for e in errors)


def test_check_sarif_is_valid_and_points_at_the_model_file(tmp_path, matrix, validator, monkeypatch):
    monkeypatch.chdir(tmp_path)
    q4_gguf(tmp_path / "models" / "q4.gguf")
    result = pipeline.run(CheckRequest("models/q4.gguf", ["fastserve", "tinycpp"], ["cpu"]), matrix)
    doc = json.loads(sarif.render(result))
    assert _errors(validator, doc) == []
    run = doc["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == list(RULES)
    [res] = run["results"]  # fastserve x cpu unsupported; tinycpp native has no finding
    assert res["ruleId"] == "QC110" and res["level"] == "error"
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == "QC110"
    [loc] = res["locations"]
    assert loc["physicalLocation"]["artifactLocation"] == {"uri": "models/q4.gguf", "uriBaseId": "%SRCROOT%"}
    assert loc["logicalLocations"][0]["name"] == "general.file_type"
    assert "fastserve 0.33.0 x cpu" in res["message"]["text"]
    assert run["invocations"][0]["exitCode"] == 1


def test_directory_models_point_at_config_json_and_ids_are_stable(tmp_path, matrix, validator, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bf16_dir(tmp_path / "bf16")
    mxfp4_dir(tmp_path / "gpt oss #1%")  # a path that needs percent-encoding
    a = pipeline.run(CheckRequest("gpt oss #1%", ["tinycpp"], ["cpu"]), matrix)
    doc = json.loads(sarif.render(a))
    assert _errors(validator, doc) == []
    [res] = doc["runs"][0]["results"]
    assert res["ruleId"] == "QC111"  # unknown: no sourced rule
    uri = res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "gpt%20oss%20%231%25/config.json"
    assert res["locations"][0]["logicalLocations"][0]["name"] == "config.json:quantization_config"
    again = json.loads(sarif.render(pipeline.run(CheckRequest("gpt oss #1%", ["tinycpp"], ["cpu"]), matrix)))
    assert again["runs"][0]["results"][0]["partialFingerprints"] == res["partialFingerprints"]
    b = pipeline.run(CheckRequest("bf16", ["tinycpp"], ["cpu"]), matrix)
    other = json.loads(sarif.render(b))["runs"][0]["results"][0]
    assert other["ruleId"] == "QC110"
    assert other["partialFingerprints"] != res["partialFingerprints"]


def test_gate_sarif_with_unjudged_models_is_valid(tmp_path, matrix, validator, monkeypatch):
    from qcheck.gate import run_gate
    from qcheck.policy import load_policy

    monkeypatch.chdir(tmp_path)
    q4_gguf(tmp_path / "q4.gguf")
    malformed_safetensors(tmp_path / "bad.safetensors")
    lfs_pointer(tmp_path / "pointer.gguf")
    (tmp_path / "qcheck.toml").write_text(
        'models = ["q4.gguf", "bad.safetensors", "pointer.gguf", "org/not-downloaded"]\n'
        '[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n')
    policy = load_policy()
    policy.models = [m for m in policy.models if not m.hub]  # no network: the Hub id is only parsed
    result = run_gate(policy, matrix=matrix)
    doc = json.loads(sarif.render(result))
    assert _errors(validator, doc) == []
    rules = sorted(r["ruleId"] for r in doc["runs"][0]["results"])
    assert rules == ["QC100", "QC102"]
    levels = {r["ruleId"]: r["level"] for r in doc["runs"][0]["results"]}
    assert levels == {"QC100": "error", "QC102": "error"}  # lfs-pointers = "error" (the default)
