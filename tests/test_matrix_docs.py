"""docs/matrix.md is generated from matrices/ and must stay in sync with it.

After editing matrices/, regenerate with: python -m qcheck matrix --format markdown -o docs/matrix.md
"""

from __future__ import annotations

from pathlib import Path

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.table import build_matrix
from qcheck.report.markdown_matrix import render

DOCS = Path(__file__).resolve().parent.parent / "docs" / "matrix.md"


def test_docs_matrix_is_in_sync_with_the_data() -> None:
    expected = render(build_matrix(load_matrix()))
    assert DOCS.is_file(), "docs/matrix.md is missing: python -m qcheck matrix --format markdown -o docs/matrix.md"
    actual = DOCS.read_text(encoding="utf-8")
    assert actual == expected, ("docs/matrix.md is stale: regenerate it with "
                                "python -m qcheck matrix --format markdown -o docs/matrix.md")


def test_docs_page_has_a_table_per_method_and_the_sources() -> None:
    text = render(build_matrix(load_matrix()))
    for method in ("none", "gguf", "fp8", "nvfp4", "mxfp4", "awq", "gptq"):
        assert f"## `{method}`" in text
    assert "**Legend:**" in text and "## Engines and sources" in text
    assert "vllm-project/vllm" in text
