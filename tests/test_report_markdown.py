"""Markdown tables for pull-request comments: one row per verdict, every cell escaped."""

from __future__ import annotations

import pytest

from qcheck.matrix import load_matrix
from qcheck.pipeline import run
from qcheck.report import markdown
from qcheck.request import CheckRequest
from support.gate_helpers import TEST_MATRIX, fp8_dir


@pytest.fixture
def matrix(monkeypatch):
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    return load_matrix(TEST_MATRIX)


def _rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| Model"):
            # split on pipes that are not escaped
            cells = [c.strip() for c in __import__("re").split(r"(?<!\\)\|", line)[1:-1]]
            rows.append(cells)
    return rows


def test_check_table_one_row_per_verdict(tmp_path, matrix, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fp8_dir(tmp_path / "fp8")
    result = run(CheckRequest("fp8", ["fastserve", "tinycpp"], ["a100"]), matrix)
    text = markdown.render(result)
    assert text.startswith("### qcheck check: ❌ fail — 1 of 2 combinations fail (exit 1)\n")
    rows = _rows(text)
    assert len(rows) == 2 and all(len(r) == 5 for r in rows)
    assert rows[0][:4] == ["fp8", "fastserve 0.33.0", "a100", "🟡 fallback"]
    assert rows[1][:4] == ["fp8", "tinycpp b10488 \\[cuda\\]", "a100", "**FAIL** ❌ unsupported"]


def test_hostile_cells_cannot_break_the_table_or_inject_html():
    hostile = "a | b\n| c | d |\n<script>alert(1)</script> `code` [link](http://x)"
    data = {"schema": "qcheck.check/1", "policy": {},
            "inspection": {"path": "m|x.gguf", "container": "gguf", "quantization": {"method": "gguf"}},
            "verdicts": [{"engine": "e|1", "engine_version": "1", "gpu": "g", "arch": "a", "status": "unsupported",
                          "reasons": [hostile], "requires": [], "suggestions": [], "sources": []}],
            "exit_code": 1}
    text = markdown.render(data)
    [row] = _rows(text)
    assert len(row) == 5
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "`[link](http://x)`" in row[4]  # a link-like token is a code span: no link, no autolink
    assert row[0] == "m\\|x.gguf"


def test_eval_and_gate_tables():
    eval_data = {"schema": "qcheck.eval/1", "reference": {"path": "ref"}, "tasks": {"items": 5},
                 "candidates": [{"name": "q4", "metrics": {"kld_mean": 0.0312, "top1_agreement": 0.915,
                                                          "ppl_ratio": 1.0213},
                                 "gate": {"passed": False, "failures": [{"message": "top1_agreement 0.915 < min-top1 0.92"}]}}],
                 "exit_code": 1}
    text = markdown.render(eval_data)
    assert "| q4 | 0.0312 | 91.5% | 1.021 | – | ❌ **fail** | top1\\_agreement 0.915 &lt; min-top1 0.92 |" in text


def test_long_tables_are_bounded():
    verdict = {"engine": "e", "engine_version": "1", "gpu": "g", "arch": "a", "status": "native", "reasons": [],
               "requires": [], "suggestions": [], "sources": []}
    data = {"schema": "qcheck.check/1", "policy": {}, "inspection": {"path": "m.gguf", "container": "gguf",
                                                                     "quantization": {}},
            "verdicts": [verdict] * (markdown.MAX_ROWS + 100), "exit_code": 0}
    text = markdown.render(data)
    assert len(_rows(text)) == markdown.MAX_ROWS
    assert "… 100 more rows in the JSON report" in text
