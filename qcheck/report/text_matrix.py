"""Human text for ``qcheck matrix``: one table per checkpoint variant, architectures down, engines across."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from qcheck.report.terminal import width

if TYPE_CHECKING:
    from qcheck.matrix.table import MatrixResult, MatrixTable
    from qcheck.model import Judgement, Verdict

WORDS = {"native": "native", "fallback": "fallback", "unsupported": "no", "unknown": "?"}
LEGEND = ("native = the format's own kernel; fallback = a slower substitute path; no = unsupported;\n"
          "? = unknown (no sourced rule); * = only with a requirement (plugin, flag, merge).\n"
          "`qcheck check PATH --engine E --gpu G` explains a cell: kernel, requirements, reasons, sources.")


def cell(v: Verdict | Judgement | None) -> str:
    """The short word for one verdict or judgement: native / fallback / no / ?, with * when it has requirements."""
    if v is None:
        return ""
    return WORDS.get(v.status, v.status) + ("*" if v.requires else "")


def render_table(table: MatrixTable) -> list[str]:
    """One table, as a grid when it fits the terminal (or there is none), else one block per engine."""
    grid = render_grid(table)
    columns = width()
    if columns is None or max(len(line) for line in grid) <= columns:
        return grid
    return render_by_engine(table)


def render_by_engine(table: MatrixTable) -> list[str]:
    """A table too wide for the terminal: engines down, each with the columns grouped by status."""
    columns = width()
    labels = [r.label for r in table.rows]
    first = max(len(x) for x in labels) if labels else 0
    lines = [table.title]
    for row, label in zip(table.rows, labels, strict=True):
        groups: dict[str, list[str]] = {}
        for col in table.columns:
            v = row.cells.get(col)
            if v is not None:
                groups.setdefault(WORDS.get(v.status, v.status), []).append(col + ("*" if v.requires else ""))
        parts = []
        for word in ("native", "fallback", "no", "?"):
            cols = groups.get(word)
            if cols:
                every = len(cols) == len(row.cells) > 2 and not any(c.endswith("*") for c in cols)
                parts.append((f"{word}: ", f"all {len(cols)} targets" if every else ", ".join(cols)))
        for i, (head, text) in enumerate(parts):
            prefix = f"  {(label if i == 0 else '').ljust(first)}  {head}"
            lines.extend(textwrap.wrap(text, max(columns or 0, len(prefix) + 20), initial_indent=prefix,
                                       subsequent_indent=" " * len(prefix), break_long_words=False,
                                       break_on_hyphens=False))
    return lines


def render_overview(result: MatrixResult) -> str:
    """``qcheck matrix`` without a method or checkpoint: where each variant runs natively, one line each."""
    lines = [f"qcheck matrix: {len(result.tables)} format variants (cells: --method METHOD)", ""]
    method = None
    for table in result.tables:
        if table.method != method:
            method = table.method
            lines.append(f"{method}:")
        variant = table.title.split(": ", 1)[-1]
        native = [r.engine for r in table.rows if any(v.status == "native" for v in r.cells.values())]
        fallback = [r.engine for r in table.rows if r.engine not in native
                    and any(v.status == "fallback" for v in r.cells.values())]
        parts = [f"native on {', '.join(dict.fromkeys(native))}" if native else "native nowhere"]
        if fallback:
            parts.append(f"fallback only on {', '.join(dict.fromkeys(fallback))}")
        lines.append(f"  {variant}: {'; '.join(parts)}")
    lines += ["", "`qcheck matrix --method METHOD [--engine E] [--gpu G]` shows the cells; "
              "`qcheck matrix --format markdown` the whole table."]
    return "\n".join(lines) + "\n"


def render_grid(table: MatrixTable) -> list[str]:
    """One table: architectures down, engines across, one short word per cell (see ``cell``)."""
    headers = [r.label for r in table.rows]
    row_labels = []
    for col in table.columns:
        sample = next((r.cells[col] for r in table.rows if col in r.cells), None)
        sm = f" sm{sample.compute_capability.replace('.', '')}" if sample and sample.compute_capability else ""
        row_labels.append(col + sm)
    first = max([len(x) for x in row_labels] + [12])
    widths = [max(len(h), 8) for h in headers]
    lines = [table.title, "  " + "".ljust(first) + "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    for col, label in zip(table.columns, row_labels, strict=True):
        cells = [cell(r.cells.get(col)).ljust(w) for r, w in zip(table.rows, widths, strict=True)]
        lines.append("  " + label.ljust(first) + "  " + "  ".join(cells).rstrip())
    return lines


def render(result: MatrixResult) -> str:
    """Every table, then the legend (the overview when no method or checkpoint was asked for)."""
    if result.overview:
        return render_overview(result)
    lines: list[str] = []
    for table in result.tables:
        lines.extend(render_table(table))
        lines.append("")
    lines.append(LEGEND)
    return "\n".join(lines) + "\n"
