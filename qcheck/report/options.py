"""The options block (``verdicts[].options``, built by qcheck.options) in text and Markdown, from its JSON form: one
line per option with its settings in the engine's words, what that deployment does on the GPUs named and its decode
ceiling at its context."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: where the options block's lines start in a verdict block ("  options:   ")
_INDENT = 13


def _rows(options: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    from qcheck.memory.records import DeploymentOption
    from qcheck.options import decode_words, outcome_words

    rows = []
    for o in options:
        opt = DeploymentOption.from_json(o)
        rows.append((opt.label, outcome_words(opt), decode_words(opt)))
    return rows


def heading(gpu: str | None) -> str:
    return f"on the {gpu or 'GPU'} named, each judged like the deployment asked:"


def text_lines(options: list[dict[str, Any]], gpu: str | None) -> list[str]:
    """The block under a verdict's ``options:`` label: a table (option, what it does; its decode) when it fits the
    terminal or goes to a pipe, else each option on its own line with what it does wrapped beneath it. Labels are
    never cut: they are the settings to type."""
    import textwrap

    from qcheck.report.terminal import width

    rows = [(a, b + (f"; {c}" if c else "")) for a, b, c in _rows(options)]
    first = max(len(a) for a, _ in rows)
    table = [f"{a:<{first}}  {b}" for a, b in rows]
    columns = width()
    if columns is None or _INDENT + max(len(line) for line in table) <= columns:
        return [heading(gpu), *table]
    room = max(columns - _INDENT - 4, 20)
    out = [heading(gpu)]
    for a, b in rows:
        out += [a, *textwrap.wrap(b, room, initial_indent="    ", subsequent_indent="    ",
                                  break_long_words=False, break_on_hyphens=False)]
    return out


def markdown_lines(verdicts: list[dict[str, Any]], label: Callable[[dict[str, Any]], str],
                   cell: Callable[..., str]) -> list[str]:
    """One table per verdict that has options: option (the engine's settings), what it does, decode."""
    out: list[str] = []
    for v in verdicts:
        options = v.get("options")
        if not isinstance(options, list) or not options:
            continue
        out += ["", f"#### Options: {cell(label(v), 80)}", "", cell(heading(v.get("gpu")), 200), "",
                "| option | on the GPU | decode |", "|---|---|---|"]
        out += [f"| {cell(a, 120)} | {cell(b, 200)} | {cell(c, 60) or ' '} |" for a, b, c in _rows(options)]
    return out
