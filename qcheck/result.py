"""What every result is to the output layer: a ``kind``, an exit code and its JSON. Below the commands that make
results and the renderers that read them (``qcheck.report``), so neither imports the other for it."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Result"]


class Result(Protocol):
    kind: str

    @property
    def exit_code(self) -> int: ...  # read-only: results compute it (a field or a property both fit)

    def to_json(self) -> dict[str, Any]: ...
