"""``qcheck check``'s records and exit-code rule, and reading the models a target names.

The pipeline (``qcheck.pipeline``) answers a ``CheckRequest`` with a ``CheckResult`` (one model) or a
``ResultSet`` (several). Exit codes (docs/design.md, decided per verdict by ``qcheck.outcome``): 0 all run (and start with the settings
asked), 1 any cannot run or does not start / unknown (unless allowed) / fallback when native is required, 2 input
not judged (raised as QcheckError before any result exists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.errors import UnsafeFileError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import CHECK_SCHEMA, Inspection, Verdict
from qcheck.outcome import Outcome, StrictnessFlags, outcome, policy_json, verdict_record
from qcheck.saved_inspection import inspection_from_json, load_saved_inspection

if TYPE_CHECKING:
    from qcheck.request import CheckRequest
    from qcheck.result import Result

__all__ = ["CHECK_SET_SCHEMA", "INSPECTION_SET_SCHEMA", "CheckResult", "ResultSet", "inspect_target",
           "inspection_from_json", "load_saved_inspection", "load_targets", "verdict_fails"]

CHECK_SET_SCHEMA = "qcheck.check-set/1"
INSPECTION_SET_SCHEMA = "qcheck.inspection-set/1"


@dataclass
class CheckResult:
    """The result of ``qcheck check``: the inspection and one verdict per (engine, GPU), with the question it
    answers (its strictness decides pass or fail through ``qcheck.outcome``)."""

    inspection: Inspection
    verdicts: list[Verdict]
    #: the question this answers (None for results not made by the pipeline: judged with the default strictness)
    request: CheckRequest | None = None
    warnings: list[str] = field(default_factory=list)
    kind: str = "check"
    #: ``--gpu`` without ``--engine``: every engine was tried to explore, not to gate. Verdicts are sorted
    #: (native, fallback, unknown, unsupported) and the run exits 0 when any engine runs the checkpoint.
    explore: bool = False

    def outcome(self, verdict: Verdict) -> Outcome:
        """Whether this verdict fails the run (exit 1) under the request's strictness, and why."""
        return outcome(verdict, self.request)

    def fails(self, verdict: Verdict) -> bool:
        return self.outcome(verdict).fails

    @property
    def exit_code(self) -> int:
        if self.explore:
            return 0 if any(not self.fails(v) for v in self.verdicts) else 1
        return 1 if any(self.fails(v) for v in self.verdicts) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CHECK_SCHEMA,
            "inspection": self.inspection.to_json(),
            "verdicts": [verdict_record(v, self.request) for v in self.verdicts],
            "policy": policy_json(self.request),
            "warnings": list(self.warnings),
            "explore": self.explore,
            **({"deployment": self.request.origin.to_json()} if self.request and self.request.origin else {}),
            "exit_code": self.exit_code,
        }


#: the order an exploration lists verdicts in: what works first
EXPLORE_ORDER = {"native": 0, "fallback": 1, "unknown": 2, "unsupported": 3}


@dataclass
class ResultSet:
    """Several models judged in one run (``--all``): one result per model, the worst exit code (2 > 1 > 0).

    ``kind`` is the per-model kind plus ``-set`` ("check-set", "inspect-set"); renderers iterate ``results``.
    """

    target: str
    results: Sequence[Result]  # covariant: a list of CheckResult or of InspectResult
    kind: str
    schema: str

    @property
    def exit_code(self) -> int:
        return max((r.exit_code for r in self.results), default=0)

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "target": self.target, "results": [r.to_json() for r in self.results],
                "exit_code": self.exit_code}


def verdict_fails(verdict: Verdict, *, require_native: bool = False, allow_unknown: bool = False,
                  require_kv_scales: bool = False, kernels_only: bool = False) -> bool:
    """The DESIGN exit-code rule for one verdict under these flags (``qcheck.outcome.outcome``, the one rule)."""
    return outcome(verdict, StrictnessFlags(require_native, allow_unknown, require_kv_scales, kernels_only)).fails


def inspect_target(target: str, limits: Limits = DEFAULT_LIMITS) -> Inspection:
    """The Inspection of a checkpoint (or of a saved inspection record); a pickle raises UnsafeFileError."""
    return load_targets(target, limits)[0]


def load_targets(target: str, limits: Limits = DEFAULT_LIMITS, *, all_models: bool = False) -> list[Inspection]:
    """The Inspection of every model the target names (``all_models``: each GGUF model of a directory or repo), or
    of a saved inspection record; a pickle raises UnsafeFileError. The Inspection carries everything the
    verdicts, memory and speed need (its ``shape``), so nothing is read twice and no Checkpoint is kept."""
    inspection = load_saved_inspection(target, limits)
    if inspection is not None:
        inspections = [inspection]
    else:
        from qcheck.classify import classify
        from qcheck.readers import load_checkpoints

        inspections = [classify(ck) for ck in load_checkpoints(target, limits, all_models=all_models)]
    for inspection in inspections:
        if inspection.container == "pickle":
            # a pickle cannot be judged from headers and is never loaded: exit 2, as `qcheck inspect` does
            from qcheck.inspect import InspectResult

            raise UnsafeFileError(InspectResult(inspection).error_line())
    return inspections
