"""Pass/fail thresholds for ``qcheck eval`` and ``qcheck gate``.

Thresholds come from flags (``--max-kld`` ...), a named tier (``--tier good``) or a policy mapping
(``Thresholds.from_mapping({...})`` from a TOML policy); explicit values override the tier's. A threshold
that is ``None`` is not checked. With ``use_intervals`` the gate is conservative: it compares the
unfavourable end of each 95 % interval (upper bound of KLD and PPL ratio, lower bound of agreement,
accuracy delta and recovery) instead of the point estimate.

Tier defaults follow docs/research/evals.md §7 (published llama.cpp scale for LLaMA-3-8B on wikitext:
q8_0 mean KLD 0.0014 / same-top-p 97.7 %, q6_K 0.0055 / 96.0 %, q4_K_M 0.031 / 91.9 %, q3_K_M 0.10,
q2_K 0.445 / 71.1 %; tools/perplexity/README.md, llama.cpp PR #6936).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from qcheck.errors import UsageError

#: name -> (thresholds, where the numbers come from)
TIERS: dict[str, tuple[dict[str, Any], str]] = {
    "near-lossless": ({"max_kld": 0.005, "min_top1": 0.97},
                      "docs/research/evals.md §7: FP8, q8_0, q6_K class (LLaMA-3-8B q8_0 0.0014/97.7 %, q6_K 0.0055/96.0 %)"),
    "good": ({"max_kld": 0.03, "min_top1": 0.92},
             "docs/research/evals.md §7: q4_K_M / W4A16 class (LLaMA-3-8B q4_K_M 0.031/91.9 %)"),
    "acceptable": ({"max_kld": 0.1, "min_top1": 0.88},
                   "docs/research/evals.md §7: the boundary of 'degraded' (mean KLD > 0.1, top-1 < 88 %; q3_K_M 0.10)"),
}

#: threshold name -> (metric it reads, direction, interval end used with use_intervals, valid range)
_CHECKS: dict[str, tuple[str, str, str | None, tuple[float, float]]] = {
    "max_kld": ("kld_mean", "max", "high", (0.0, math.inf)),
    "max_kld_p99": ("kld_p99", "max", None, (0.0, math.inf)),
    "max_kld_max": ("kld_max", "max", None, (0.0, math.inf)),
    "min_top1": ("top1_agreement", "min", "low", (0.0, 1.0)),
    "max_ppl_ratio": ("ppl_ratio", "max", "high", (0.0, math.inf)),
    "max_delta_p_rms": ("delta_p_rms", "max", None, (0.0, 1.0)),
    "max_accuracy_drop": ("accuracy_drop", "max", "high", (0.0, 1.0)),
    "min_recovery": ("recovery", "min", "low", (0.0, math.inf)),
    "max_flips": ("flips", "max", None, (0.0, 1.0)),
    "max_flips_c_to_i": ("flips_c_to_i", "max", None, (0.0, 1.0)),
    "min_greedy_agreement": ("greedy_agreement", "min", "low", (0.0, 1.0)),
    "min_answer_agreement": ("answer_agreement", "min", None, (0.0, 1.0)),
    "max_kld_kv_only": ("kv_only_kld_mean", "max", "high", (0.0, math.inf)),
    # generation behaviour (qcheck.eval.generation): generate items, reference against candidate
    "min_length_ratio": ("length_ratio", "min", "low", (0.0, math.inf)),
    "max_length_ratio": ("length_ratio", "max", "high", (0.0, math.inf)),
    "max_termination_drop": ("termination_drop", "max", "high", (0.0, 1.0)),
    "max_repetition_increase": ("repetition_increase", "max", "high", (0.0, 1.0)),
    "min_json_valid": ("json_valid", "min", "low", (0.0, 1.0)),
    "max_json_validity_drop": ("json_validity_drop", "max", "high", (0.0, 1.0)),
    # what share of the task set the candidate could be measured on (an endpoint that cannot score some items)
    "min_coverage": ("coverage", "min", None, (0.0, 1.0)),
}


@dataclass
class Thresholds:
    """Gate thresholds; fractions are 0..1 (``min_top1=0.92``, ``max_accuracy_drop=0.02`` = 2 points)."""

    max_kld: float | None = None
    max_kld_p99: float | None = None
    max_kld_max: float | None = None
    min_top1: float | None = None
    max_ppl_ratio: float | None = None
    max_delta_p_rms: float | None = None
    max_accuracy_drop: float | None = None
    min_recovery: float | None = None
    max_flips: float | None = None
    max_flips_c_to_i: float | None = None
    min_greedy_agreement: float | None = None
    min_answer_agreement: float | None = None
    #: the KV cache's cost alone (reference weights with the candidate's KV cache type; ``qcheck.eval.kv_split``)
    max_kld_kv_only: float | None = None
    #: generated length, Σ candidate / Σ reference tokens over generate items (``min`` catches truncation,
    #: ``max`` run-on output)
    min_length_ratio: float | None = None
    max_length_ratio: float | None = None
    #: share of generate items the reference ends with end-of-sequence and the candidate does not (net, points)
    max_termination_drop: float | None = None
    #: mean rise of the repeated 4-gram share in the generations' tails
    max_repetition_increase: float | None = None
    #: ``json`` items: share of candidate outputs that parse and satisfy their schema, and its drop (points)
    min_json_valid: float | None = None
    max_json_validity_drop: float | None = None
    #: the smaller of the shares of items and of tokens the candidate was measured on
    min_coverage: float | None = None
    #: gate on the unfavourable end of each 95 % interval instead of the point estimate
    use_intervals: bool = False
    #: the tier the defaults came from, for the report
    tier: str | None = None

    def __post_init__(self) -> None:
        """Thresholds built directly (the Python API) are checked as the policy's and the flags' are."""
        for name in self.names():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, _check_value(name, value))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name not in ("use_intervals", "tier")]

    @classmethod
    def for_tier(cls, tier: str) -> Thresholds:
        key = tier.strip().lower().replace("_", "-")
        if key not in TIERS:
            raise UsageError(f"unknown tier {tier!r}; known: {', '.join(TIERS)}")
        return cls(tier=key, **TIERS[key][0])

    @classmethod
    def from_mapping(cls, data: dict[str, Any], base: Thresholds | None = None) -> Thresholds:
        """Build from a policy mapping (``max-kld`` or ``max_kld``; ``tier``; ``use-intervals``).

        Unknown keys and out-of-range values are a UsageError that names them.
        """
        if not isinstance(data, dict):
            raise UsageError(f"eval thresholds must be a table, not {type(data).__name__}")
        norm = {str(k).strip().lower().replace("-", "_"): v for k, v in data.items()}
        known = set(cls.names()) | {"tier", "use_intervals"}
        unknown = sorted(k for k in norm if k not in known)
        if unknown:
            raise UsageError(f"unknown eval threshold(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        result = dataclasses.replace(base) if base is not None else cls()
        if "tier" in norm and norm["tier"] is not None:
            if not isinstance(norm["tier"], str):
                raise UsageError("tier must be a string")
            result = result.merged(cls.for_tier(norm["tier"]), only_unset=False)
        for key, value in norm.items():
            if key == "tier":
                continue
            if key == "use_intervals":
                if not isinstance(value, bool):
                    raise UsageError("use_intervals must be true or false")
                result.use_intervals = value
                continue
            setattr(result, key, _check_value(key, value))
        return result

    def merged(self, other: Thresholds, only_unset: bool = True) -> Thresholds:
        """``other``'s values on top of ours (or only where ours are unset)."""
        out = dataclasses.replace(self)
        for name in self.names():
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and (mine is None or not only_unset):
                setattr(out, name, theirs)
        out.tier = other.tier or self.tier
        out.use_intervals = self.use_intervals or other.use_intervals
        return out

    def active(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in self.names() if getattr(self, n) is not None}

    def to_json(self) -> dict[str, Any]:
        return {**self.active(), "tier": self.tier, "use_intervals": self.use_intervals}


def _check_value(key: str, value: Any) -> float:
    """A threshold as a float: a finite number in its range. ``inf`` (TOML's ``inf``, ``1e309``, ``--max-kld inf``) has
    no meaning a gate could honour: to not check a metric, leave its threshold out."""
    name = key.replace("_", "-")  # as the policy key and the flag spell it
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"threshold {name} must be a number, not {value!r}")
    lo, hi = _CHECKS[key][3]
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        value = math.inf
    if not math.isfinite(value):
        raise UsageError(f"threshold {name}={value} is not a finite number; leave it out to not check that metric")
    if not lo <= value <= hi:
        raise UsageError(f"threshold {name}={value} is outside [{lo}, {'any finite number' if hi == math.inf else hi}]")
    return value


@dataclass
class GateOutcome:
    passed: bool
    failures: list[dict[str, Any]]
    checked: list[str]
    skipped: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "failures": self.failures, "checked": self.checked, "skipped": self.skipped}


def _observed(metric: str, metrics: dict[str, Any], intervals: dict[str, Any], end: str | None,
              use_intervals: bool) -> tuple[float | None, str]:
    if metric == "accuracy_drop":
        delta = metrics.get("accuracy_delta")
        if delta is None:
            return None, "point"
        if use_intervals and "accuracy_delta" in intervals and intervals["accuracy_delta"].get("low") is not None:
            return -float(intervals["accuracy_delta"]["low"]), "interval"
        return -float(delta), "point"
    value = metrics.get(metric)
    if value is None:
        return None, "point"
    if use_intervals and end and metric in intervals and intervals[metric].get(end) is not None:
        return float(intervals[metric][end]), "interval"
    return float(value), "point"


def evaluate(thresholds: Thresholds, metrics: dict[str, Any], intervals: dict[str, Any]) -> GateOutcome:
    """Check every active threshold; a metric that could not be measured is skipped, not failed."""
    failures: list[dict[str, Any]] = []
    checked: list[str] = []
    skipped: list[str] = []
    for name, limit in thresholds.active().items():
        metric, direction, end, _ = _CHECKS[name]
        value, basis = _observed(metric, metrics, intervals, end, thresholds.use_intervals)
        if value is None:
            skipped.append(name)
            continue
        checked.append(name)
        if not math.isfinite(value):  # NaN/inf from a broken candidate must never pass silently
            failures.append({"threshold": name, "metric": metric, "value": None, "limit": limit, "basis": basis,
                             "message": f"{metric} is not a finite number (the candidate produced NaN or inf "
                                        "log-probs)"})
            continue
        bad = value > limit if direction == "max" else value < limit
        if bad:
            rel = ">" if direction == "max" else "<"
            failures.append({"threshold": name, "metric": metric, "value": value, "limit": limit, "basis": basis,
                             "message": f"{metric} {_fmt(value)} {rel} {name.replace('_', '-')} {_fmt(limit)}"
                                        + (" (95 % interval bound)" if basis == "interval" else "")})
    return GateOutcome(passed=not failures, failures=failures, checked=checked, skipped=skipped)


def resolution_warnings(thresholds: Thresholds, metrics: dict[str, Any], intervals: dict[str, Any]) -> list[str]:
    """Warn when the task set is too small to tell the metric from its threshold (docs/research/evals.md §2, §7)."""
    from qcheck.eval.stats import paired_mde

    out: list[str] = []
    for name, limit in thresholds.active().items():
        metric = _CHECKS[name][0]
        ci = intervals.get(metric)
        if ci and ci.get("low") is not None and ci.get("high") is not None and ci["low"] <= limit <= ci["high"]:
            out.append(f"{name.replace('_', '-')} {_fmt(limit)} lies inside the 95 % interval of {metric} "
                       f"[{_fmt(ci['low'])}, {_fmt(ci['high'])}]: the task set is too small to resolve it; add items")
    margin = thresholds.max_accuracy_drop
    m = metrics.get("items_scored") or 0
    if margin is not None and m:
        rho = max(float(metrics.get("flips") or 0.0), 1.0 / m)
        mde = paired_mde(rho, m)
        if mde > margin:
            z = paired_mde(1.0, 1)  # (z_{1-α/2} + z_{1-β})
            out.append(f"max-accuracy-drop {_fmt(margin)}: with {m} items and a flip rate of {_fmt(rho)} the smallest "
                       f"detectable accuracy difference is about {_fmt(mde)} (α 0.05, power 0.8); "
                       f"about {math.ceil(z * z * rho / (margin * margin))} items are needed")
    return out


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) < 0.001 or abs(x) >= 1e5:
        return f"{x:.3g}"
    return f"{x:.4g}"
