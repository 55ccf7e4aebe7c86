"""The output layer: one renderer module per format, all driven by a result's ``to_json()``.

A result is anything with ``kind`` ("inspect", "check", "matrix", "eval", "gate"), ``exit_code`` and
``to_json()``. ``qcheck.report.<format>.render(result) -> str`` renders it; writing is atomic so a
failed run never leaves a half-written report.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from typing import Any, Protocol

FORMATS = ("text", "json", "junit", "sarif", "github", "markdown")


class Result(Protocol):
    kind: str
    exit_code: int

    def to_json(self) -> dict[str, Any]: ...


def render(result: Result, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n"
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    module = importlib.import_module(f"qcheck.report.{fmt}")
    return module.render(result)


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, then rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".qcheck-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def emit(result: Result, fmt: str, path: str | None = None) -> None:
    text = render(result, fmt)
    if path and path != "-":
        write_atomic(path, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
