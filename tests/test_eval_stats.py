"""Statistics against hand-computed / published values (no scipy on this machine)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qcheck.eval import stats


def test_wilson_known_values():
    # p̂ = 0.5, n = 10, z = 1.959964: centre 0.5, half = z/(1+z²/n)·sqrt(0.025 + z²/400) = 0.2634
    iv = stats.wilson(5, 10)
    assert iv.low == pytest.approx(0.236593, abs=1e-5)
    assert iv.high == pytest.approx(0.763407, abs=1e-5)
    # 0 successes of 20: the upper bound is z²/(n+z²) = 3.8415/23.8415 = 0.16113
    iv = stats.wilson(0, 20)
    assert iv.low == 0.0
    assert iv.high == pytest.approx(0.161125, abs=1e-5)
    # 95 of 100 (a standard textbook case): [0.8882, 0.9785]
    iv = stats.wilson(95, 100)
    assert (round(iv.low, 4), round(iv.high, 4)) == (0.8882, 0.9785)


def test_mcnemar_exact_known_values():
    # b=0, c=5: p = 2·(1/2)^5 = 0.0625
    assert stats.mcnemar_exact(0, 5) == pytest.approx(0.0625)
    # b=2, c=8: 2·P(X<=2), X~Bin(10,.5) = 2·(1+10+45)/1024 = 0.109375
    assert stats.mcnemar_exact(2, 8) == pytest.approx(0.109375)
    assert stats.mcnemar_exact(8, 2) == pytest.approx(0.109375)
    # symmetric / no discordant pairs
    assert stats.mcnemar_exact(5, 5) == 1.0
    assert stats.mcnemar_exact(0, 0) == 1.0
    # large n stays exact in log space: b=40, c=60 -> 2·P(X<=40), X~Bin(100,.5)
    exact = 2 * sum(math.comb(100, k) for k in range(41)) / 2**100
    assert stats.mcnemar_exact(40, 60) == pytest.approx(exact, rel=1e-9)


def test_paired_delta_and_mde():
    delta, iv = stats.paired_accuracy_delta(b=10, c=4, n=100)
    assert delta == pytest.approx(-0.06)
    se = math.sqrt(14 - 36 / 100) / 100
    assert iv.low == pytest.approx(-0.06 - 1.959964 * se, abs=1e-6)
    assert iv.high == pytest.approx(-0.06 + 1.959964 * se, abs=1e-6)
    # docs/research/evals.md §2 example: ρ_d = 0.10, m = 1000 -> δ* ≈ 2.8 pp
    assert stats.paired_mde(0.10, 1000) == pytest.approx(0.0280, abs=2e-4)


def test_cluster_bootstrap_is_seeded_and_clusters_matter():
    rng = np.random.default_rng(0)
    # 20 documents, each with a document-level offset: tokens inside one document are correlated
    docs = np.repeat(np.arange(20), 50)
    values = rng.normal(0, 0.1, docs.size) + rng.normal(0, 1.0, 20)[docs]
    a = stats.cluster_bootstrap_mean(values, docs, n_boot=500, seed=7)
    b = stats.cluster_bootstrap_mean(values, docs, n_boot=500, seed=7)
    assert (a.low, a.high) == (b.low, b.high)
    assert a.low < values.mean() < a.high
    # treating every token as its own cluster (i.i.d.) gives a much narrower, over-confident interval
    iid = stats.cluster_bootstrap_mean(values, np.arange(values.size), n_boot=500, seed=7)
    assert (iid.high - iid.low) < 0.5 * (a.high - a.low)


def test_paired_bootstrap_ratio_brackets_recovery():
    ref = np.array([1] * 80 + [0] * 20, dtype=float)
    cand = ref.copy()
    cand[:8] = 0  # 8 C->I flips: recovery 72/80 = 0.9
    iv = stats.paired_bootstrap_ratio(cand, ref, n_boot=1000, seed=1)
    assert iv.low < 0.9 < iv.high
    assert iv.high <= 1.0 + 1e-12


def _replicates(values: np.ndarray, clusters: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """The bootstrap replicates written out independently: draw k clusters with replacement, token-weighted mean."""
    ids = sorted(set(clusters.tolist()))
    sums = np.array([values[clusters == c].sum() for c in ids])
    counts = np.array([(clusters == c).sum() for c in ids], dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_boot, len(ids)))
    return sums[draws].sum(axis=1) / counts[draws].sum(axis=1)


@pytest.mark.parametrize("level", [0.95, 0.9, 0.5])
def test_cluster_bootstrap_interval_is_at_the_level_percentiles(level):
    """A 95 % interval is the 2.5th and 97.5th percentile of the replicates, not the 5th and 95th: 2.5 % of the
    replicates fall below it and 2.5 % above (a 90 % interval labelled 95 % is ~12 % narrower; the gate reads its
    upper end)."""
    rng = np.random.default_rng(3)
    docs = np.repeat(np.arange(40), rng.integers(5, 60, 40))
    values = rng.gamma(2.0, 0.01, docs.size) * rng.uniform(0.5, 2.0, 40)[docs]
    iv = stats.cluster_bootstrap_mean(values, docs, n_boot=2000, seed=11, level=level)
    est = _replicates(values, docs, 2000, 11)
    tail = 100 * (1 - level) / 2
    assert (iv.low, iv.high) == pytest.approx((np.percentile(est, tail), np.percentile(est, 100 - tail)), rel=1e-12)
    assert np.mean(est < iv.low) == pytest.approx((1 - level) / 2, abs=1 / 2000)
    assert np.mean(est > iv.high) == pytest.approx((1 - level) / 2, abs=1 / 2000)
    assert (iv.method, iv.level, iv.to_json()["level"]) == ("cluster-bootstrap", level, level)


def test_cluster_bootstrap_chunks_give_the_same_replicates_as_one_draw():
    """Many clusters are drawn in chunks of at most 2,000,000 indices; the chunks continue one random stream."""
    clusters = np.arange(5000)  # 2,000,000 // 5000 = 400 replicates a chunk: 1000 replicates in 3 chunks
    values = np.random.default_rng(1).exponential(1.0, 5000)
    iv = stats.cluster_bootstrap_mean(values, clusters, n_boot=1000, seed=4)
    est = _replicates(values, clusters, 1000, 4)
    assert (iv.low, iv.high) == pytest.approx((np.percentile(est, 2.5), np.percentile(est, 97.5)), rel=1e-12)


def test_paired_bootstrap_ratio_interval_is_at_the_level_percentiles():
    rng = np.random.default_rng(5)
    den = (rng.random(300) < 0.7).astype(float)
    num = den * (rng.random(300) < 0.9)
    iv = stats.paired_bootstrap_ratio(num, den, n_boot=1500, seed=9, level=0.9)
    draws = np.random.default_rng(9).integers(0, 300, size=(1500, 300))
    est = num[draws].sum(axis=1) / den[draws].sum(axis=1)
    assert (iv.low, iv.high) == pytest.approx((np.percentile(est, 5), np.percentile(est, 95)), rel=1e-12)
    assert (iv.method, iv.level) == ("paired-bootstrap", 0.9)


def test_percentile_interval_is_the_one_home_of_the_quantiles():
    reps = np.arange(1, 101, dtype=float)  # 1..100: numpy's linear quantile at 2.5 % is 1 + 0.025 x 99
    iv = stats.percentile_interval(reps, 0.95, "m")
    assert (iv.low, iv.high, iv.method, iv.level) == (pytest.approx(3.475), pytest.approx(97.525), "m", 0.95)
    empty = stats.percentile_interval(np.array([]), 0.95, "m")
    assert math.isnan(empty.low) and math.isnan(empty.high)
    assert empty.to_json() == {"low": None, "high": None, "method": "m", "level": 0.95}


# --------------------------------------------------------------------------------------------- edges
def test_defaults_are_the_documented_ones():
    """docs/eval.md: 1000 bootstrap replicates by default and a fixed seed (a run is reproducible across releases:
    the default seed is the day llama.cpp's KL-divergence PR #5076 was merged)."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "eval.md").read_text(encoding="utf-8")
    assert "bootstrap replicates (default 1000)" in docs
    assert (stats.DEFAULT_BOOTSTRAP, stats.DEFAULT_SEED) == (1000, 20240122)
    rng = np.random.default_rng(2)
    docs_ids = np.repeat(np.arange(12), 7)
    values = rng.exponential(0.01, docs_ids.size)
    default = stats.cluster_bootstrap_mean(values, docs_ids)
    assert default == stats.cluster_bootstrap_mean(values, docs_ids, n_boot=1000, seed=20240122, level=0.95)
    assert default != stats.cluster_bootstrap_mean(values, docs_ids, n_boot=1000, seed=20240123)
    assert stats.paired_bootstrap_ratio(values, values + 1) == stats.paired_bootstrap_ratio(
        values, values + 1, n_boot=1000, seed=20240122, level=0.95)
    assert stats.Interval(0.0, 1.0, "m").level == 0.95 and stats.wilson(1, 2).level == 0.95


def test_z_values():
    assert stats.z_value() == pytest.approx(1.959964, abs=1e-6)
    assert stats.z_value(0.9) == pytest.approx(1.644854, abs=1e-6)
    assert stats.z_value(0.95, two_sided=False) == pytest.approx(1.644854, abs=1e-6)
    assert stats.z_value(0.99) == pytest.approx(2.575829, abs=1e-6)


def test_wilson_at_its_edges():
    assert stats.wilson(0, 0) == stats.Interval(0.0, 1.0, "wilson", 0.95)
    assert stats.wilson(3, -1) == stats.Interval(0.0, 1.0, "wilson", 0.95)
    z2 = stats.z_value() ** 2
    all_right = stats.wilson(10, 10)  # successes == n is allowed: the lower end is n / (n + z²)
    assert (all_right.low, all_right.high) == (pytest.approx(10 / (10 + z2), rel=1e-12), 1.0)
    # the centre plus the half-width rounds just past 1 (and below 0) for some n: the interval is clamped to [0, 1]
    assert stats.wilson(9, 9).high == 1.0 and stats.wilson(26, 26).high == 1.0
    assert stats.wilson(0, 2).low == 0.0 and stats.wilson(0, 6).low == 0.0
    # one item is a sample (n = 1 is the first n with an interval narrower than [0, 1])
    one_right, one_wrong = stats.wilson(1, 1), stats.wilson(0, 1)
    assert (one_right.low, one_right.high) == (pytest.approx(1 / (1 + z2), rel=1e-12), 1.0)
    assert (one_wrong.low, one_wrong.high) == (0.0, pytest.approx(z2 / (1 + z2), rel=1e-12))
    for bad in ((11, 10), (-1, 10)):
        with pytest.raises(ValueError, match=r"successes -?\d+ not in \[0, 10\]"):
            stats.wilson(*bad)


def test_binomial_cdf_edges_and_large_n():
    assert stats.binom_cdf_half(-1, 5) == 0.0
    assert [stats.binom_cdf_half(n, n) for n in (1, 5, 40, 1000)] == [1.0] * 4
    assert stats.binom_cdf_half(6, 5) == 1.0
    assert stats.binom_cdf_half(0, 3) == pytest.approx(1 / 8)
    assert stats.binom_cdf_half(2, 3) == pytest.approx(7 / 8)
    # summing 341 terms rounds to 1.000000000000067 before the clamp: a probability is never above 1
    assert stats.binom_cdf_half(340, 400) == 1.0
    # 2000 discordant pairs: summed in log space from the largest term (from the smallest, exp overflows)
    exact = 2 * sum(math.comb(2000, k) for k in range(901)) / 2**2000
    assert stats.mcnemar_exact(900, 1100) == pytest.approx(exact, rel=1e-9)
    assert stats.mcnemar_exact(1100, 900) == pytest.approx(exact, rel=1e-9)


def test_mcnemar_refuses_negative_counts_either_side():
    for b, c in ((-1, 3), (3, -1), (-2, -2)):
        with pytest.raises(ValueError, match="counts must be non-negative"):
            stats.mcnemar_exact(b, c)
    assert stats.mcnemar_exact(1, 0) == 1.0 and stats.mcnemar_exact(0, 1) == 1.0


def test_paired_delta_and_mde_edges():
    assert stats.paired_accuracy_delta(0, 0, 0) == (0.0, stats.Interval(-1.0, 1.0, "paired-normal", 0.95))
    delta, iv = stats.paired_accuracy_delta(0, 0, 100)  # no discordant pairs: no spread at all
    assert (delta, iv.low, iv.high) == (0.0, 0.0, 0.0)
    delta, iv = stats.paired_accuracy_delta(0, 10, 10)  # every item flipped the same way: variance 10 - 100/10 = 0
    assert (delta, iv.low, iv.high) == (1.0, 1.0, 1.0)
    delta, iv = stats.paired_accuracy_delta(1, 0, 1)  # one item, flipped right to wrong: a delta, not "no data"
    assert (delta, iv.low, iv.high, iv.method) == (-1.0, -1.0, -1.0, "paired-normal")
    assert stats.paired_mde(0.1, 0) == math.inf and stats.paired_mde(0.1, -5) == math.inf
    assert stats.paired_mde(-0.1, 100) == 0.0


def test_bootstraps_of_one_value_and_of_none():
    one = stats.cluster_bootstrap_mean(np.array([0.25]), np.array([7]), n_boot=50)
    assert (one.low, one.high) == (0.25, 0.25)
    empty = stats.cluster_bootstrap_mean(np.array([]), np.array([]))
    assert math.isnan(empty.low) and math.isnan(empty.high) and empty.method == "cluster-bootstrap"
    ratio = stats.paired_bootstrap_ratio(np.array([0.5]), np.array([2.0]), n_boot=50)
    assert (ratio.low, ratio.high) == (0.25, 0.25)
    none = stats.paired_bootstrap_ratio(np.array([]), np.array([]))
    assert math.isnan(none.low) and math.isnan(none.high) and none.method == "paired-bootstrap"


def test_paired_ratio_drops_replicates_without_a_denominator_and_divides_fractions():
    """Replicates whose denominator sums to 0 have no ratio and are left out (not counted as 0); a replicate whose
    denominator is a fraction or exactly 1 is divided by it."""
    den = np.array([1.0] + [0.0] * 9)
    num = np.array([1.0] + [0.0] * 9)
    iv = stats.paired_bootstrap_ratio(num, den, n_boot=400, seed=3)
    assert (iv.low, iv.high) == (1.0, 1.0)  # every replicate with the item has ratio 1; the rest are dropped
    assert stats.paired_bootstrap_ratio(np.zeros(4), np.zeros(4), n_boot=50).method == "paired-bootstrap"
    assert math.isnan(stats.paired_bootstrap_ratio(np.zeros(4), np.zeros(4), n_boot=50).low)
    half = stats.paired_bootstrap_ratio(np.array([0.125, 0.125]), np.array([0.25, 0.25]), n_boot=50)
    assert (half.low, half.high) == (0.5, 0.5)  # a denominator summing to 0.5 divides (it is not taken as 1)
    ones = stats.paired_bootstrap_ratio(np.array([0.5, 0.0]), np.array([1.0, 0.0]), n_boot=200, seed=1)
    assert (ones.low, ones.high) == (0.5, 0.5)  # a denominator of exactly 1 is a ratio, not a gap
