"""The eval gate at its edges: every threshold with its metric exactly at the limit (passes) and one step past it
(fails), every range end of every threshold, the interval end each one reads, the tier table against docs/eval.md,
and the resolution warnings at the bounds of their intervals."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from qcheck.errors import UsageError
from qcheck.eval import gate
from qcheck.eval.gate import TIERS, Thresholds, evaluate, resolution_warnings
from qcheck.eval.stats import paired_mde

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: threshold -> the metric it reads (docs/eval.md names each flag and metric)
METRIC = {"max_kld": "kld_mean", "max_kld_p99": "kld_p99", "max_kld_max": "kld_max", "min_top1": "top1_agreement",
          "max_ppl_ratio": "ppl_ratio", "max_delta_p_rms": "delta_p_rms", "max_accuracy_drop": "accuracy_drop",
          "min_recovery": "recovery", "max_flips": "flips", "max_flips_c_to_i": "flips_c_to_i",
          "min_greedy_agreement": "greedy_agreement", "min_answer_agreement": "answer_agreement",
          "max_kld_kv_only": "kv_only_kld_mean", "min_length_ratio": "length_ratio",
          "max_length_ratio": "length_ratio", "max_termination_drop": "termination_drop",
          "max_repetition_increase": "repetition_increase", "min_json_valid": "json_valid",
          "max_json_validity_drop": "json_validity_drop", "min_coverage": "coverage"}
#: thresholds on a share or a drop in points: 0..1 (the others: any non-negative finite number)
FRACTIONS = {"min_top1", "max_delta_p_rms", "max_accuracy_drop", "max_flips", "max_flips_c_to_i",
             "min_greedy_agreement", "min_answer_agreement", "max_termination_drop", "max_repetition_increase",
             "min_json_valid", "max_json_validity_drop", "min_coverage"}
#: thresholds that read their metric's interval with --gate-on-intervals (the rest read the point estimate)
ON_INTERVALS = {"max_kld", "min_top1", "max_ppl_ratio", "max_accuracy_drop", "min_recovery", "min_greedy_agreement",
                "max_kld_kv_only", "min_length_ratio", "max_length_ratio", "max_termination_drop",
                "max_repetition_increase", "min_json_valid", "max_json_validity_drop"}


def _row(name: str) -> tuple[str, str, str | None, tuple[float, float]]:
    """What a threshold's name and the sets above say its row is: a ``max_`` threshold fails above its limit and
    reads an interval's high end, a ``min_`` one below and the low end."""
    direction = name.split("_", 1)[0]
    end = ("high" if direction == "max" else "low") if name in ON_INTERVALS else None
    return METRIC[name], direction, end, (0.0, 1.0 if name in FRACTIONS else math.inf)


CHECKS = {name: _row(name) for name in METRIC}


def test_every_threshold_row_is_the_documented_one():
    assert gate._CHECKS == CHECKS
    assert Thresholds.names() == list(CHECKS)
    documented = (DOCS / "eval.md").read_text(encoding="utf-8") + (DOCS / "ci.md").read_text(encoding="utf-8")
    for name in CHECKS:
        assert f"--{name.replace('_', '-')}" in documented or name.replace("_", "-") in documented, name


def _metrics_at(name: str, value: float) -> dict[str, float]:
    metric = CHECKS[name][0]
    if metric == "accuracy_drop":  # the gate reads the drop as minus the accuracy delta
        return {"accuracy_delta": -value}
    return {metric: value}


#: limits inside every range, with a value one representable step past each (a float next to it)
LIMITS = [0.0, 0.02, 0.5, 1.0]


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("limit", LIMITS)
def test_a_metric_exactly_at_its_limit_passes_and_one_step_past_fails(name, limit):
    metric, direction, _, (lo, hi) = CHECKS[name]
    if not lo <= limit <= hi:
        pytest.fail(f"{limit} outside the range of {name}")
    t = Thresholds(**{name: limit})
    at = evaluate(t, _metrics_at(name, limit), {})
    assert (at.passed, at.checked, at.failures, at.skipped) == (True, [name], [], [])
    past = math.nextafter(limit, math.inf if direction == "max" else -math.inf)
    out = evaluate(t, _metrics_at(name, past), {})
    assert not out.passed and out.checked == [name]
    (failure,) = out.failures
    rel = ">" if direction == "max" else "<"
    assert failure == {"threshold": name, "metric": metric, "value": past, "limit": limit,
                       "basis": "point",
                       "message": f"{metric} {gate._fmt(past)} {rel} {name.replace('_', '-')} {gate._fmt(limit)}"}
    inside = math.nextafter(limit, -math.inf if direction == "max" else math.inf)
    if lo <= inside <= hi:
        assert evaluate(t, _metrics_at(name, inside), {}).passed


def test_lossless_candidate_passes_zero_drop_and_full_agreement_limits():
    """``max-accuracy-drop = 0`` and friends at their limit: the unquantised candidate has exactly no loss."""
    t = Thresholds(max_accuracy_drop=0, max_flips=0, max_flips_c_to_i=0, min_top1=1, min_greedy_agreement=1,
                   min_answer_agreement=1, max_kld=0, max_ppl_ratio=1, min_recovery=1, min_coverage=1)
    lossless = {"accuracy_delta": 0.0, "flips": 0.0, "flips_c_to_i": 0.0, "top1_agreement": 1.0,
                "greedy_agreement": 1.0, "answer_agreement": 1.0, "kld_mean": 0.0, "ppl_ratio": 1.0,
                "recovery": 1.0, "coverage": 1.0}
    intervals = {"accuracy_delta": {"low": 0.0, "high": 0.0}, "kld_mean": {"low": 0.0, "high": 0.0},
                 "top1_agreement": {"low": 1.0, "high": 1.0}}
    for use in (False, True):
        t.use_intervals = use
        out = evaluate(t, lossless, intervals)
        assert out.passed and out.failures == [] and sorted(out.checked) == sorted(t.active())


@pytest.mark.parametrize("name", list(CHECKS))
def test_interval_mode_reads_the_unfavourable_end_only_where_there_is_one(name):
    metric, direction, end, _ = CHECKS[name]
    limit = 0.5
    point = 0.5  # the point estimate sits on the limit: passes
    low, high = (0.4, 0.6)
    metrics = _metrics_at(name, point)
    iv_metric = "accuracy_delta" if metric == "accuracy_drop" else metric
    intervals = {iv_metric: {"low": -high, "high": -low} if metric == "accuracy_drop" else {"low": low, "high": high}}
    plain = evaluate(Thresholds(**{name: limit}), metrics, intervals)
    assert plain.passed
    strict = evaluate(Thresholds(**{name: limit}, use_intervals=True), metrics, intervals)
    if end is None:  # no interval end for this metric: the point decides
        assert strict.passed
        return
    assert not strict.passed
    (failure,) = strict.failures
    assert failure["basis"] == "interval" and failure["message"].endswith(" (95 % interval bound)")
    assert failure["value"] == pytest.approx(0.6 if direction == "max" else 0.4)


def test_interval_mode_without_the_interval_or_its_end_uses_the_point():
    metrics = {"kld_mean": 0.02, "accuracy_delta": -0.01}
    t = Thresholds(max_kld=0.03, max_accuracy_drop=0.02, use_intervals=True)
    for intervals in ({}, {"kld_mean": {"low": 0.01, "high": None}, "accuracy_delta": {"low": None, "high": 0.0}}):
        out = evaluate(t, metrics, intervals)
        assert out.passed and out.checked == ["max_kld", "max_accuracy_drop"]
    # an accuracy interval whose low end is known: the drop is minus that low end
    out = evaluate(t, metrics, {"accuracy_delta": {"low": -0.05, "high": 0.03}})
    (failure,) = out.failures
    assert (failure["threshold"], failure["value"], failure["basis"]) == ("max_accuracy_drop", 0.05, "interval")


def test_unmeasured_metrics_are_skipped_and_non_finite_ones_fail():
    t = Thresholds(max_kld=0.1, min_top1=0.9, max_accuracy_drop=0.02, min_coverage=0.5)
    out = evaluate(t, {"kld_mean": None, "top1_agreement": math.inf, "coverage": math.nan}, {})
    assert out.skipped == ["max_kld", "max_accuracy_drop"]
    assert out.checked == ["min_top1", "min_coverage"]
    assert [(f["threshold"], f["value"], f["basis"]) for f in out.failures] == [
        ("min_top1", None, "point"), ("min_coverage", None, "point")]
    assert all("not a finite number" in f["message"] for f in out.failures)
    assert evaluate(Thresholds(), {"kld_mean": 9.0}, {}) == gate.GateOutcome(True, [], [], [])


@pytest.mark.parametrize("name", list(CHECKS))
def test_every_range_end_is_accepted_and_a_step_outside_is_refused(name):
    lo, hi = CHECKS[name][3]
    key = name.replace("_", "-")
    assert getattr(Thresholds.from_mapping({key: lo}), name) == lo
    below = math.nextafter(lo, -math.inf)
    with pytest.raises(UsageError, match=rf"threshold {key}=.* is outside \[{lo}, "):
        Thresholds.from_mapping({key: below})
    if hi == math.inf:
        assert getattr(Thresholds.from_mapping({key: 1e300}), name) == 1e300
        with pytest.raises(UsageError, match=rf"outside \[{lo}, any finite number\]"):
            Thresholds(**{name: -1})
        return
    assert getattr(Thresholds(**{name: hi}), name) == hi
    with pytest.raises(UsageError, match=rf"threshold {key}=.* is outside \[{lo}, {hi}\]"):
        Thresholds(**{name: math.nextafter(hi, math.inf)})


def test_values_are_floats_and_booleans_are_not_numbers():
    t = Thresholds.from_mapping({"max-kld": 0, "min_top1": 1})
    assert (t.max_kld, t.min_top1) == (0.0, 1.0) and type(t.max_kld) is float
    with pytest.raises(UsageError, match="threshold max-kld must be a number, not True"):
        Thresholds.from_mapping({"max-kld": True})
    with pytest.raises(UsageError, match="use_intervals must be true or false"):
        Thresholds.from_mapping({"use-intervals": 1})
    with pytest.raises(UsageError, match="tier must be a string"):
        Thresholds.from_mapping({"tier": 3})
    with pytest.raises(UsageError, match="eval thresholds must be a table, not list"):
        Thresholds.from_mapping([])  # type: ignore[arg-type]
    assert Thresholds.from_mapping({"tier": None}) == Thresholds()


def test_tiers_are_the_table_in_docs_eval_md():
    """The tier numbers are documented in one table (docs/eval.md, from the published llama.cpp scale)."""
    text = (DOCS / "eval.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z-]+)` \| ([\d.]+) \| (\d+) % \|", text, flags=re.M)
    documented = {name: {"max_kld": float(kld), "min_top1": int(top1) / 100} for name, kld, top1 in rows}
    assert documented == {name: values for name, (values, _) in TIERS.items()}
    assert set(documented) == {"near-lossless", "good", "acceptable"}
    for name, (values, source) in TIERS.items():
        t = Thresholds.for_tier(name)
        assert (t.tier, t.active()) == (name, values)
        assert source.startswith("docs/research/evals.md §7")
    assert Thresholds.for_tier(" Near_Lossless ").tier == "near-lossless"
    with pytest.raises(UsageError, match="unknown tier 'best'; known: near-lossless, good, acceptable"):
        Thresholds.for_tier("best")


def test_explicit_values_beat_the_tier_in_any_order_and_base_values_survive():
    base = Thresholds(max_kld=0.2, max_flips=0.1, use_intervals=True)
    t = Thresholds.from_mapping({"max-kld": 0.02, "tier": "good"}, base=base)
    assert (t.max_kld, t.min_top1, t.max_flips, t.tier, t.use_intervals) == (0.02, 0.92, 0.1, "good", True)
    assert base.max_kld == 0.2  # the base is copied, not changed
    # the tier replaces what the base had for its own keys (a policy's tier over the defaults)
    assert Thresholds.from_mapping({"tier": "good"}, base=base).max_kld == 0.03
    assert Thresholds.from_mapping({"use-intervals": False}, base=base).use_intervals is False
    # keys after the tier are read too, in any order
    after = Thresholds.from_mapping({"tier": "good", "max-kld": 0.02, "use_intervals": True, "max-flips": 0.05})
    assert (after.max_kld, after.min_top1, after.use_intervals, after.max_flips) == (0.02, 0.92, True, 0.05)


def test_merged_fills_only_unset_values_unless_told_to_override():
    mine = Thresholds(max_kld=0.01, tier="good")
    other = Thresholds(max_kld=0.5, min_top1=0.8, tier=None, use_intervals=True)
    under = mine.merged(other)
    assert (under.max_kld, under.min_top1, under.tier, under.use_intervals) == (0.01, 0.8, "good", True)
    over = mine.merged(other, only_unset=False)
    assert (over.max_kld, over.min_top1) == (0.5, 0.8)
    assert Thresholds(max_kld=0.01).merged(Thresholds()).active() == {"max_kld": 0.01}
    assert Thresholds(tier="good").merged(Thresholds(tier="acceptable")).tier == "acceptable"
    assert Thresholds().merged(Thresholds()).use_intervals is False
    assert mine.to_json() == {"max_kld": 0.01, "tier": "good", "use_intervals": False}


@pytest.mark.parametrize("limit, warns", [(0.01, True), (0.03, True), (0.02, True),
                                          (math.nextafter(0.01, 0), False), (math.nextafter(0.03, 1), False)])
def test_resolution_warning_when_the_limit_is_inside_the_interval_ends_included(limit, warns):
    intervals = {"kld_mean": {"low": 0.01, "high": 0.03}}
    out = resolution_warnings(Thresholds(max_kld=limit), {"kld_mean": 0.02}, intervals)
    assert out == ([f"max-kld {gate._fmt(limit)} lies inside the 95 % interval of kld_mean [0.01, 0.03]: the task "
                    "set is too small to resolve it; add items"] if warns else [])
    assert resolution_warnings(Thresholds(max_kld=limit), {}, {"kld_mean": {"low": None, "high": 0.03}}) == []


def test_accuracy_resolution_warning_counts_the_items_needed():
    # 50 items, flip rate 0.1: the MDE is (z.975 + z.8) * sqrt(0.1 / 50) = 0.1253 > 0.02
    (msg,) = resolution_warnings(Thresholds(max_accuracy_drop=0.02), {"items_scored": 50, "flips": 0.1}, {})
    z = paired_mde(1.0, 1)
    assert z == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert msg == (f"max-accuracy-drop 0.02: with 50 items and a flip rate of 0.1 the smallest detectable accuracy "
                   f"difference is about {gate._fmt(paired_mde(0.1, 50))} (α 0.05, power 0.8); about "
                   f"{math.ceil(z * z * 0.1 / 0.02**2)} items are needed")
    assert "about 1963 items are needed" in msg  # 7.849 * 0.1 / 0.0004 = 1962.2
    # no flips at all: the rate is taken as one flip in the set (1/m), not zero
    (msg,) = resolution_warnings(Thresholds(max_accuracy_drop=0.02), {"items_scored": 100, "flips": 0.0}, {})
    assert "a flip rate of 0.01 " in msg
    # a margin the set resolves: no warning; the MDE exactly at the margin is not a warning either
    assert resolution_warnings(Thresholds(max_accuracy_drop=0.2), {"items_scored": 1000, "flips": 0.1}, {}) == []
    mde = paired_mde(0.1, 1000)
    assert resolution_warnings(Thresholds(max_accuracy_drop=mde), {"items_scored": 1000, "flips": 0.1}, {}) == []
    assert resolution_warnings(Thresholds(max_accuracy_drop=0.02), {"items_scored": 0, "flips": 0.1}, {}) == []
    assert resolution_warnings(Thresholds(max_kld=0.1), {"items_scored": 50, "flips": 0.1}, {}) == []


@pytest.mark.parametrize("x, text", [(0, "0"), (0.0, "0"), (0.001, "0.001"), (0.000999, "0.000999"),
                                     (0.0123456, "0.01235"), (12346.0, "1.235e+04"), (123456.0, "1.23e+05"),
                                     (-0.0005, "-0.0005"), (-123456.0, "-1.23e+05"), (1.5, "1.5")])
def test_numbers_in_gate_messages(x, text):
    assert gate._fmt(x) == text
