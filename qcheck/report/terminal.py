"""Text output fitted to a terminal: word wrapping with hanging indents, and colour on a TTY.

The text renderers write plain lines; when the text goes to a terminal (or ``COLUMNS`` is set) ``fit``
wraps prose lines at word boundaries, continuing under the label's value column (``why:``, ``try:``,
``sources:``, an inspection key ...), and leaves table rows to their renderers, which read ``width()``
to fit or transpose themselves. ``colourise`` adds ANSI colour through rich on a TTY unless ``NO_COLOR``
is set. Piped output without ``COLUMNS`` stays exactly as rendered, so it can be grepped and diffed.
"""

from __future__ import annotations

import contextlib
import os
import re
import textwrap
from collections.abc import Iterator
from typing import IO

#: the width the renderers should fit, while ``rendering_for`` is active (None: no limit)
_WIDTH: int | None = None
MIN_WIDTH = 40

# a leading label: words ending with ': ' or followed by a run of two or more spaces
_LABEL = re.compile(r"(\S+(?: \S+){0,3}?)(?::[ ]+|[ ]{2,})")
_TABLE_GAP = re.compile(r"\S {2,}\S")


def terminal_width(stream: IO[str] | None) -> int | None:
    """``COLUMNS`` when set, else the width of ``stream`` when it is a terminal, else None (no limit)."""
    value = os.environ.get("COLUMNS", "").strip()
    if value.isascii() and value.isdigit() and int(value[:9]) > 0:  # isdigit alone accepts '²', which int() refuses
        return max(int(value), MIN_WIDTH)
    try:
        is_tty = stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        is_tty = False
    if not is_tty or stream is None:
        return None
    try:
        columns = os.get_terminal_size(stream.fileno()).columns  # (shutil's wrapper costs an import of bz2, lzma)
    except (AttributeError, ValueError, OSError):
        columns = 0
    return max(columns or 100, MIN_WIDTH)


def wants_colour(stream: IO[str] | None) -> bool:
    """Colour only on a terminal, never with ``NO_COLOR`` (any value) or ``TERM=dumb``."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def width() -> int | None:
    """The width the current text rendering must fit, or None when it goes to a file or a pipe."""
    return _WIDTH


@contextlib.contextmanager
def rendering_for(columns: int | None) -> Iterator[None]:
    """Let the text renderers called inside read ``width()``."""
    global _WIDTH
    previous, _WIDTH = _WIDTH, columns
    try:
        yield
    finally:
        _WIDTH = previous


def hanging_indent(line: str, previous: int | None = None) -> int:
    """The column a wrapped line continues at: after a leading label; for an unlabelled line at the
    previous line's value column (``previous``), that column; else two past the line's indent."""
    lead = len(line) - len(line.lstrip(" "))
    m = _LABEL.match(line, lead)
    if m and m.end() - lead <= 16 and m.end() < len(line):
        return m.end()
    return lead if lead and lead == previous else lead + 2


def wrap_line(line: str, columns: int, previous: int | None = None) -> list[str]:
    """Wrap one line at word boundaries with a hanging indent; table rows and short lines are kept."""
    if len(line) <= columns:
        return [line]
    indent = hanging_indent(line, previous)
    head, rest = line[:indent], line[indent:]
    if _TABLE_GAP.search(rest) or indent > columns // 2:
        return [line]  # a table row (its renderer fits it) or nothing sensible to wrap under
    lines = textwrap.wrap(rest, columns - indent, break_long_words=False, break_on_hyphens=False)
    if not lines:
        return [line]
    return [head + lines[0], *(" " * indent + part for part in lines[1:])]


def fit(text: str, columns: int | None) -> str:
    """Every line of ``text`` wrapped to ``columns`` (unchanged when ``columns`` is None)."""
    if columns is None:
        return text
    out: list[str] = []
    previous: int | None = None
    for line in text.split("\n"):
        out.extend(wrap_line(line, columns, previous))
        previous = hanging_indent(line, previous) if line.strip() else None
    return "\n".join(out)


_STYLES = [
    (r"(?m)^\s*\bNATIVE\b", "bold green"),
    (r"(?m)^\s*\bFALLBACK\b", "bold yellow"),
    (r"(?m)^\s*\bUNSUPPORTED\b", "bold red"),
    (r"(?m)^\s*\bUNKNOWN\b", "bold magenta"),
    (r"\bPASS\b", "bold green"),
    (r"\bFAIL(?:ED)?\b", "bold red"),
    (r"<- fails", "red"),
    (r"NOT JUDGED|NOT MEASURED", "bold red"),
    (r"(?m)^\s+(?:kernel|requires|why|warning|try|memory|sources|note):", "dim"),
    (r"(?m)^\s*warning:", "yellow"),
    (r"(?m)^qcheck [a-z]+:", "bold"),
]
_CELL_STYLES = {"native": "green", "fallback": "yellow", "no": "red", "?": "magenta"}
_CELL = re.compile(r"(?<=  )(native|fallback|no|\?)\*?(?= |$|: )", re.M)


def colourise(text: str, kind: str = "") -> str:
    """``text`` with ANSI colours for statuses, PASS/FAIL and labels (matrix cells when ``kind`` is matrix)."""
    import io

    from rich.console import Console
    from rich.text import Text

    styled = Text(text)
    for pattern, style in _STYLES:
        styled.highlight_regex(pattern, style)
    if kind == "matrix":
        for m in _CELL.finditer(text):
            styled.stylize(_CELL_STYLES[m.group(1)], m.start(), m.end())
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=max(len(text), 80),
                      soft_wrap=True, highlight=False, emoji=False, markup=False)
    console.print(styled, end="")
    return buffer.getvalue()


def for_terminal(text: str, stream: IO[str] | None, kind: str = "") -> str:
    """``text`` fitted to ``stream``'s width and coloured when ``stream`` is a terminal."""
    text = fit(text, terminal_width(stream))
    return colourise(text, kind) if wants_colour(stream) else text
