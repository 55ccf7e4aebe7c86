"""``qcheck inspect``: read a checkpoint's headers and say what it is (no engine, no GPU).

``inspect_path`` = ``load_checkpoint`` + ``classify``. ``InspectResult`` is the output layer's result
object: exit code 0 for an inspected checkpoint, 2 for a pickle (never loaded, not judged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Inspection


def inspect_path(target: str, limits: Limits = DEFAULT_LIMITS) -> Inspection:
    """Read ``target`` (file, directory or Hub repo id), headers only, and classify it."""
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    return classify(load_checkpoint(target, limits))


@dataclass
class InspectResult:
    """An inspection as the output layer sees it (``kind``, ``exit_code``, ``to_json``)."""

    inspection: Inspection
    kind: str = "inspect"

    @property
    def exit_code(self) -> int:
        """2 when the input could not be judged (a pickle), else 0."""
        return 2 if self.unsafe else 0

    @property
    def unsafe(self) -> bool:
        return self.inspection.container == "pickle"

    def error_line(self) -> str:
        """The one stderr line for an unsafe input (without the ``qcheck: error:`` prefix)."""
        finding = next((f for f in self.inspection.findings if f.kind == "unsafe-pickle"), None)
        message = finding.message if finding else "pickle checkpoint: not statically verifiable, never unpickled"
        return f"{self.inspection.path}: {message}"

    def to_json(self) -> dict[str, Any]:
        data = self.inspection.to_json()
        data["exit_code"] = self.exit_code
        return data
