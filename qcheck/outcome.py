"""Pass or fail: the one rule that turns a verdict and the question it answers into the run's exit code.

Every door (``qcheck check``, ``qcheck gate`` over models and over manifests, ``qcheck hook``, the which-quant-fits
table, the Python API) and every report (text, JSON, JUnit, SARIF, GitHub, Markdown) asks this function; none
decides on its own (docs/design.md, exit codes):

* ``unsupported`` fails: the engine refuses the checkpoint, a setting, or does not start with the settings asked
  (the ``start-up`` dimension, judged when a memory question is asked and ``kernels_only`` is off);
* ``unknown`` fails unless ``allow_unknown``;
* a ``kv-scales`` risk (default KV-cache scales of 1.0) fails under ``require_kv_scales``;
* ``fallback`` fails under ``require_native``;
* ``native`` passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from qcheck.model import Verdict

__all__ = ["DEFAULT_STRICTNESS", "Outcome", "Strictness", "StrictnessFlags", "decided_by_startup", "outcome", "policy_json", "verdict_record"]

#: the start-up dimension's name (qcheck.memory.startup): a verdict it decides "does not start"
STARTUP = "start-up"


class Strictness(Protocol):
    """How strictly a verdict is judged: a ``CheckRequest`` is one, as is ``StrictnessFlags``."""

    @property
    def require_native(self) -> bool: ...

    @property
    def allow_unknown(self) -> bool: ...

    @property
    def require_kv_scales(self) -> bool: ...

    @property
    def kernels_only(self) -> bool: ...


@dataclass(frozen=True)
class StrictnessFlags:
    """Strictness with no request behind it (a manifest entry qcheck could not turn into one)."""

    require_native: bool = False
    allow_unknown: bool = False
    require_kv_scales: bool = False
    kernels_only: bool = False


DEFAULT_STRICTNESS = StrictnessFlags()


@dataclass(frozen=True)
class Outcome:
    """Whether one verdict fails the run, and why (JSON ``verdicts[].outcome``): ``because`` holds one word per
    rule that failed it (``unsupported``, ``does-not-start``, ``unknown``, ``start-up-unknown``, ``fallback``,
    ``kv-scales``), ``reasons`` the sentences a person reads."""

    fails: bool
    because: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def startup(self) -> bool:
        """Whether the engine's start-up with the settings asked is what fails it."""
        return any(b in ("does-not-start", "start-up-unknown") for b in self.because)

    def to_json(self) -> dict[str, Any]:
        return {"fails": self.fails, "because": list(self.because), "reasons": list(self.reasons)}


def decided_by_startup(verdict: Verdict) -> bool:
    """The start-up dimension set the status (no worse dimension besides it)."""
    return any(d.dimension == STARTUP and d.status == verdict.status for d in verdict.dimensions) and not any(
        d.dimension != STARTUP and d.status == verdict.status for d in verdict.dimensions)


def outcome(verdict: Verdict, strictness: Strictness | None = None) -> Outcome:
    """Pass or fail for one verdict under ``strictness`` (a ``CheckRequest``; None: the defaults)."""
    s = strictness if strictness is not None else DEFAULT_STRICTNESS
    status = verdict.status
    first = verdict.reasons[0] if verdict.reasons else status
    if status == "unsupported":
        word = "does-not-start" if decided_by_startup(verdict) else "unsupported"
        return Outcome(True, (word,), (first,))
    if status == "unknown":
        if s.allow_unknown:
            return Outcome(False)
        word = "start-up-unknown" if decided_by_startup(verdict) else "unknown"
        return Outcome(True, (word,), (f"{first} (--allow-unknown passes an unknown)",))
    because: list[str] = []
    reasons: list[str] = []
    if s.require_kv_scales:
        for risk in verdict.risks:
            if risk.kind == "kv-scales":
                because.append("kv-scales")
                reasons.append(f"--require-kv-scales: {risk.message}")
                break
    if status == "fallback" and s.require_native:
        because.append("fallback")
        how = f" ({verdict.kernel})" if verdict.kernel else ""
        reasons.append(f"--require-native: it runs through a fallback{how}")
    return Outcome(bool(because), tuple(because), tuple(reasons))


def policy_json(strictness: Strictness | None = None) -> dict[str, bool]:
    """The strictness as the JSON outputs state it (``policy``)."""
    s = strictness if strictness is not None else DEFAULT_STRICTNESS
    return {"require_native": s.require_native, "allow_unknown": s.allow_unknown,
            "require_kv_scales": s.require_kv_scales, "kernels_only": s.kernels_only}


def verdict_record(verdict: Verdict, strictness: Strictness | None = None, **extra: Any) -> dict[str, Any]:
    """A verdict as a report stores it: its JSON, the strictness it was judged under (``policy``, with ``extra``
    such as the gate target's key), and the outcome (``fails``, ``outcome``; ``memory_fails``: the engine's start-up
    with the settings asked is what fails it)."""
    decided = outcome(verdict, strictness)
    return {**verdict.to_json(), "policy": {**policy_json(strictness), **extra}, "fails": decided.fails,
            "memory_fails": decided.startup, "outcome": decided.to_json()}
