"""Reading the matrix's TOML files: one parser call, errors as MatrixDataError naming the file as users see it.

Below the loader and every per-file validator (engines, GPUs, architectures), so none imports the loader back.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from qcheck.matrix.schema import MatrixDataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def display(root: Path, file: Path) -> str:
    """``matrices/engines/vllm.toml``: the file relative to the data root's parent, as messages name it."""
    try:
        return f"{root.name}/{file.relative_to(root).as_posix()}"
    except ValueError:
        return str(file)


def read_toml(root: Path, file: Path) -> dict[str, Any]:
    """A TOML file of the matrix, parsed; a syntax or read error is a MatrixDataError (exit 2)."""
    try:
        with file.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixDataError(display(root, file), "toml-syntax", str(exc)) from None
    except OSError as exc:
        raise MatrixDataError(display(root, file), "toml-syntax", f"cannot read: {exc.strerror}") from None
