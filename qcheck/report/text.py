"""Human text output: dispatches on the result kind to ``qcheck.report.text_<kind>``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qcheck.model import Inspection
    from qcheck.report import Result


def render(result: Result) -> str:
    if getattr(result, "quants", None) is not None:  # which-quant-fits table (qcheck.quant_table)
        from qcheck.quant_table import render_text

        return render_text(result)  # type: ignore[arg-type]
    results = getattr(result, "results", None)
    if result.kind.endswith("-set") and isinstance(results, list):
        return render_set(result.kind.removesuffix("-set"), results)
    module = importlib.import_module(f"qcheck.report.text_{result.kind}")
    return module.render(result)


def render_set(kind: str, results: list[Result]) -> str:
    """``--all``: each model's usual text, under a rule naming it (``[2/3] path``), blocks separated by a blank line."""
    module = importlib.import_module(f"qcheck.report.text_{kind}")
    blocks = []
    for i, result in enumerate(results, 1):
        data = result.to_json()
        path = (data.get("inspection") or data).get("path", "?")
        head = f"[{i}/{len(results)}] {path}"
        blocks.append(f"{head}\n{'=' * min(len(head), 100)}\n{module.render(result).rstrip()}\n")
    return "\n".join(blocks)


def describe_inspection(inspection: Inspection) -> str:
    module = importlib.import_module("qcheck.report.text_inspect")
    return module.describe(inspection)
