"""Options and output handling shared by every command."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from qcheck.limits import Limits
from qcheck.report import FORMATS, Result, emit

def output_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--format``, ``--json`` and ``-o``: the same on every command."""

    @click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
                  help="Output format (default: text).")
    @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    @click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
                  help="Write the report to FILE (atomically) instead of stdout.")
    @functools.wraps(func)
    def wrapper(*args: Any, fmt: str | None, as_json: bool, output: str | None, **kwargs: Any) -> Any:
        if as_json and fmt not in (None, "json"):
            raise click.UsageError("--json and --format disagree")
        kwargs["output_spec"] = OutputSpec(fmt="json" if as_json else (fmt or "text"), path=output)
        return func(*args, **kwargs)

    return wrapper


def limit_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--limit NAME=VALUE`` (repeatable): raise or lower a parsing bound for this run."""

    @click.option("--limit", "limit_pairs", multiple=True, metavar="NAME=VALUE",
                  help="Override a parsing limit, e.g. --limit max_tensors=2000000 (see docs/limits.md).")
    @functools.wraps(func)
    def wrapper(*args: Any, limit_pairs: tuple[str, ...], **kwargs: Any) -> Any:
        overrides: dict[str, str] = {}
        for pair in limit_pairs:
            name, sep, value = pair.partition("=")
            if not sep:
                raise click.UsageError(f"--limit takes NAME=VALUE, not {pair!r}")
            overrides[name] = value
        kwargs["limits"] = Limits.from_env(overrides)
        return func(*args, **kwargs)

    return wrapper


class OutputSpec:
    def __init__(self, fmt: str, path: str | None):
        self.fmt = fmt
        self.path = path


def finish(result: Result, spec: OutputSpec) -> int:
    """Write the result in the requested format and return its exit code (never format-dependent)."""
    emit(result, spec.fmt, spec.path)
    return result.exit_code
