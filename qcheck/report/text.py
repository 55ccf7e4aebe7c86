"""Human text output: an explicit table from the result kind to its renderer module (``text_<kind>``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qcheck.report import text_check, text_eval, text_gate, text_inspect, text_matrix, text_probe

if TYPE_CHECKING:
    from qcheck.model import Inspection
    from qcheck.report import Result

#: result kind -> the function that renders one result of that kind as text
RENDERERS: dict[str, Callable[[Any], str]] = {
    "inspect": text_inspect.render,
    "check": text_check.render,
    "matrix": text_matrix.render,
    "eval": text_eval.render,
    "gate": text_gate.render,
    "probe": text_probe.render,
}


def render(result: Result) -> str:
    if getattr(result, "quants", None) is not None:  # which-quant-fits table (qcheck.quant_table)
        from qcheck.quant_table import render_text

        return render_text(result)  # type: ignore[arg-type]
    results = getattr(result, "results", None)
    if result.kind.endswith("-set") and isinstance(results, list):
        return render_set(result.kind.removesuffix("-set"), results)
    return RENDERERS[result.kind](result)


def render_set(kind: str, results: list[Result]) -> str:
    """``--all``: each model's usual text, under a rule naming it (``[2/3] path``), blocks separated by a blank line."""
    render_one = RENDERERS[kind]
    blocks = []
    for i, result in enumerate(results, 1):
        data = result.to_json()
        path = (data.get("inspection") or data).get("path", "?")
        head = f"[{i}/{len(results)}] {path}"
        blocks.append(f"{head}\n{'=' * min(len(head), 100)}\n{render_one(result).rstrip()}\n")
    return "\n".join(blocks)


def describe_inspection(inspection: Inspection) -> str:
    """A one-line description for humans: 'Llama 8.0B, GGUF Q4_K_M (4.89 bpw), 4.9 GB'."""
    return text_inspect.describe(inspection)
