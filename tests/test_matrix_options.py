"""`qcheck matrix` offers only the outputs it writes (text, json, markdown; no report files), and a repeated
--method keeps every method."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from qcheck.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, ["matrix", *args], prog_name="qcheck", standalone_mode=False)


def test_help_advertises_only_what_it_writes():
    out = invoke("--help").output
    assert "[text|json|markdown]" in out
    for flag in ("--junit", "--sarif", "--github", "--markdown FILE"):
        assert flag not in out


@pytest.mark.parametrize("args", [["--format", "junit"], ["--format", "sarif"], ["--format", "github"],
                                  ["--junit", "m.xml"], ["--sarif", "m.sarif"]])
def test_report_formats_are_usage_errors_and_write_nothing(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = invoke("--method", "awq", *args)
    assert isinstance(result.exception, click.UsageError)  # exit 2 through qcheck's main
    assert list(tmp_path.iterdir()) == []


def test_method_twice_keeps_both():
    data = json.loads(invoke("--method", "awq", "--method", "gptq", "-e", "vllm", "-g", "hopper", "--json").output)
    assert [t["method"] for t in data["tables"]] == ["awq", "gptq", "gptq"]
    once = json.loads(invoke("--method", "gptq", "--method", "gptq", "-e", "vllm", "-g", "hopper", "--json").output)
    assert [t["method"] for t in once["tables"]] == ["gptq", "gptq"]  # the two gptq variants, not repeated
