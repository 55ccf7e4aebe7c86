"""Human text output: an explicit table from the result kind to its renderer module (``text_<kind>``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qcheck.model import Inspection
    from qcheck.result import Result

#: result kinds with a text renderer: ``qcheck.report.text_<kind>.render`` (imported when that kind is rendered, so
#: a check does not load the eval, gate and probe renderers)
KINDS = ("inspect", "check", "matrix", "eval", "gate", "probe")


def renderer(kind: str) -> Callable[[Any], str]:
    """The function that renders one result of ``kind`` as text."""
    if kind not in KINDS:
        raise KeyError(kind)
    render_one: Callable[[Any], str] = importlib.import_module(f"qcheck.report.text_{kind}").render
    return render_one


def render(result: Result) -> str:
    if getattr(result, "quants", None) is not None:  # which-quant-fits table (qcheck.quant_table)
        from qcheck.quant_table import render_text

        return render_text(result)  # type: ignore[arg-type]
    results = getattr(result, "results", None)
    if result.kind.endswith("-set") and isinstance(results, list):
        return render_set(result.kind.removesuffix("-set"), results)
    return renderer(result.kind)(result)


def render_set(kind: str, results: list[Result]) -> str:
    """``--all``: each model's usual text, under a rule naming it (``[2/3] path``), blocks separated by a blank line."""
    render_one = renderer(kind)
    blocks = []
    for i, result in enumerate(results, 1):
        data = result.to_json()
        path = (data.get("inspection") or data).get("path", "?")
        head = f"[{i}/{len(results)}] {path}"
        blocks.append(f"{head}\n{'=' * min(len(head), 100)}\n{render_one(result).rstrip()}\n")
    return "\n".join(blocks)


def describe_inspection(inspection: Inspection) -> str:
    """A one-line description for humans: 'Llama 8.0B, GGUF Q4_K_M (4.89 bpw), 4.9 GB'."""
    from qcheck.report.text_inspect import describe

    return describe(inspection)
