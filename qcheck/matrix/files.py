"""Reading the matrix's TOML files: one parser call, errors as MatrixDataError naming the file as users see it.

Below the loader and every per-file validator (engines, GPUs, architectures), so none imports the loader back.
The parse is memoised on disk by the files' bytes (``qcheck.datacache``): the bytes are read and hashed on every
run, the cached parse is used only for exactly those bytes, and the schema validation runs on it every time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qcheck.matrix.vocab import MatrixDataError


def display(root: Path, file: Path) -> str:
    """``matrices/engines/vllm.toml``: the file relative to the data root's parent, as messages name it."""
    try:
        return f"{root.name}/{file.relative_to(root).as_posix()}"
    except ValueError:
        return str(file)


def read_toml(root: Path, file: Path) -> dict[str, Any]:
    """A TOML file of the matrix, parsed; a syntax or read error is a MatrixDataError (exit 2)."""
    from qcheck.datacache import cached_parse

    try:
        data = file.read_bytes()
    except OSError as exc:
        raise MatrixDataError(display(root, file), "toml-syntax", f"cannot read: {exc.strerror}") from None
    value = cached_parse("toml", data, lambda raw: _parse(root, file, raw))
    if not isinstance(value, dict):  # pragma: no cover - a parse is a table; anything else is not from us
        return _parse(root, file, data)
    return value


def _parse(root: Path, file: Path, data: bytes) -> dict[str, Any]:
    """The TOML parser itself (imported here: a run whose files are all cached never loads it)."""
    from qcheck.toml_compat import tomllib
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MatrixDataError(display(root, file), "toml-syntax", f"not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise MatrixDataError(display(root, file), "toml-syntax", str(exc)) from None
