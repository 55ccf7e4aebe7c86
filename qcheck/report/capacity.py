"""The capacity table (``qcheck check --capacity``) in text and Markdown, from its JSON form
(``verdicts[].memory.concurrency``, built by qcheck.memory.capacity): one renderer input for every format."""

from __future__ import annotations

from typing import Any

#: the KV-type column's width in text
_KV_WIDTH = 29
_CELL_WIDTH = 15
_LEFT_OUT_SHOWN = 4


def _types(row: dict[str, Any]) -> str:
    names = [str(row.get("kv_cache_dtype")), *map(str, row.get("same_as") or [])]
    text = ", ".join(names)
    if row.get("asked") == "auto":
        text += " (default)"
    if row.get("status") not in (None, "native"):
        text += f" [{row.get('status')}]"
    return text


def _cell(cell: dict[str, Any]) -> str:
    sequences = cell.get("sequences")
    if sequences is None:
        return "-" if cell.get("engine_concurrency") is None else "?"
    text = f"{'>=' if cell.get('at_least') else ''}{sequences}"
    figure = cell.get("engine_concurrency")
    if figure is not None:
        text += f" ({figure:.1f}x)"
    return text


def _context(ctx: int) -> str:
    return f"{ctx // 1024}k" if ctx % 1024 == 0 else str(ctx)


def _head(rows: list[dict[str, Any]]) -> str:
    """The KV-type column's heading, with the GPU count when the table holds on several."""
    gpus = max((int(c.get("gpus") or 1) for r in rows for c in r.get("cells") or []), default=1)
    return "KV cache" + (f" ({gpus} GPUs)" if gpus > 1 else "")


def left_out_text(table: dict[str, Any]) -> str:
    """The KV types left out of the table and why, shortened past a few."""
    left = [str(x) for x in table.get("left_out") or []]
    if not left:
        return ""
    shown = ", ".join(left[:_LEFT_OUT_SHOWN])
    more = f" and {len(left) - _LEFT_OUT_SHOWN} more" if len(left) > _LEFT_OUT_SHOWN else ""
    return f"not shown: {shown}{more} (refused on this GPU, or no rule vouches for them)"


def text_lines(table: dict[str, Any]) -> list[str]:
    """The table under a verdict's ``capacity:`` label: a header of contexts, one line per KV type."""
    rows = table.get("rows") or []
    if not rows:
        return ["no KV cache type the engine accepts here has a memory estimate"]
    contexts = [int(c["context"]) for c in rows[0].get("cells") or []]
    lines = [str(table.get("note") or "sequences held at once per context"),
             f"{_head(rows):<{_KV_WIDTH}}" + "".join(f"{_context(c):>{_CELL_WIDTH}}" for c in contexts)]
    for row in rows:
        label = _types(row)
        if len(label) > _KV_WIDTH - 1:
            label = label[:_KV_WIDTH - 2] + "…"
        lines.append(f"{label:<{_KV_WIDTH}}" + "".join(f"{_cell(c):>{_CELL_WIDTH}}" for c in row.get("cells") or []))
    extra = left_out_text(table)
    if extra:
        lines.append(extra)
    return lines


def markdown_lines(verdicts: list[dict[str, Any]], label: Any, cell: Any) -> list[str]:
    """One table per verdict that has a capacity table: KV type x context. ``label(v)`` names the verdict and
    ``cell(text)`` escapes a cell (qcheck.report.markdown's)."""
    out: list[str] = []
    for v in verdicts:
        table = (v.get("memory") or {}).get("concurrency") if isinstance(v.get("memory"), dict) else None
        if not isinstance(table, dict) or not table.get("rows"):
            continue
        rows = table["rows"]
        contexts = [int(c["context"]) for c in rows[0].get("cells") or []]
        out += ["", f"#### Capacity: {cell(label(v), 80)}", "", cell(table.get("note") or "", 300), "",
                f"| {_head(rows)} | " + " | ".join(_context(c) for c in contexts) + " |",
                "|---|" + "---|" * len(contexts)]
        for row in rows:
            out.append(f"| {cell(_types(row), 60)} | " + " | ".join(cell(_cell(c), 30) for c in row.get("cells") or [])
                       + " |")
        extra = left_out_text(table)
        if extra:
            out += ["", cell(extra, 400)]
    return out
