"""Human text for ``qcheck matrix``: one table per checkpoint variant, architectures down, engines across."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qcheck.matrix.table import MatrixResult, MatrixTable
    from qcheck.model import Verdict

WORDS = {"native": "native", "fallback": "fallback", "unsupported": "no", "unknown": "?"}
LEGEND = ("native = the format's own kernel; fallback = a slower substitute path; no = unsupported;\n"
          "? = unknown (no sourced rule); * = only with a requirement (plugin, flag, merge).\n"
          "`qcheck check PATH --engine E --gpu G` explains a cell: kernel, requirements, reasons, sources.")


def cell(v: Verdict | None) -> str:
    """The short word for one verdict: native / fallback / no / ?, with * when it has requirements."""
    if v is None:
        return ""
    return WORDS.get(v.status, v.status) + ("*" if v.requires else "")


def render_table(table: MatrixTable) -> list[str]:
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
    """Every table, then the legend."""
    lines: list[str] = []
    for table in result.tables:
        lines.extend(render_table(table))
        lines.append("")
    lines.append(LEGEND)
    return "\n".join(lines) + "\n"
