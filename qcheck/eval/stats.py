"""Paired statistics for the eval gate: cluster bootstrap, Wilson, McNemar exact, paired MDE.

Why these (docs/research/evals.md §7): tokens within a document are correlated, so the CI of mean KL divergence
resamples documents, not tokens (llama.cpp's ± assumes i.i.d. tokens and is optimistic). Accuracy
differences between two models scored on the same items are paired, so McNemar's exact test on the
discordant pairs is the right test, not two independent binomials. Pure Python + numpy; no scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_BOOTSTRAP = 1000
DEFAULT_SEED = 20240122  # the day llama.cpp's KL-divergence PR #5076 was merged


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str
    level: float = 0.95

    def to_json(self) -> dict[str, float | str | None]:
        return {"low": _finite(self.low), "high": _finite(self.high), "method": self.method, "level": self.level}


def _finite(x: float) -> float | None:  # JSON has no inf/nan
    return float(x) if math.isfinite(x) else None


def z_value(level: float = 0.95, two_sided: bool = True) -> float:
    """The standard normal quantile for a confidence level (1.959964 for 95 % two-sided)."""
    tail = (1 - level) / 2 if two_sided else 1 - level
    return NormalDist().inv_cdf(1 - tail)


def wilson(successes: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval for a binomial proportion (as vLLM's accuracy_gate.py computes it, two-sided)."""
    if n <= 0:
        return Interval(0.0, 1.0, "wilson", level)
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} not in [0, {n}]")
    z = z_value(level)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(max(0.0, center - half), min(1.0, center + half), "wilson", level)


def _log_binom_pmf(k: int, n: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), summed in log space (exact to float precision, any n)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    logs = [_log_binom_pmf(i, n) for i in range(k + 1)]
    m = max(logs)
    return min(1.0, math.exp(m) * sum(math.exp(v - m) for v in logs))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (C->I) and c (I->C).

    p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2); 1.0 when there are no discordant pairs.
    """
    if b < 0 or c < 0:
        raise ValueError("counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * binom_cdf_half(min(b, c), n))


def paired_accuracy_delta(b: int, c: int, n: int, level: float = 0.95) -> tuple[float, Interval]:
    """Δacc = (c - b)/n with the paired SE sqrt(b + c - (c - b)^2/n)/n and a normal two-sided interval."""
    if n <= 0:
        return 0.0, Interval(-1.0, 1.0, "paired-normal", level)
    delta = (c - b) / n
    var = max(0.0, b + c - (c - b) ** 2 / n)
    se = math.sqrt(var) / n
    z = z_value(level)
    return delta, Interval(delta - z * se, delta + z * se, "paired-normal", level)


def paired_mde(disagreement: float, m: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest accuracy difference detectable with ``m`` paired items (docs/research/evals.md §2):

    δ* = (z_{1-α/2} + z_{1-β}) * sqrt(ρ_d / m); ρ_d = 0.10, m = 1000 gives ≈ 0.028.
    """
    if m <= 0:
        return math.inf
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(max(disagreement, 0.0) / m)


def cluster_bootstrap_mean(values: np.ndarray, clusters: np.ndarray, *, n_boot: int = DEFAULT_BOOTSTRAP,
                           seed: int = DEFAULT_SEED, level: float = 0.95) -> Interval:
    """Percentile CI of a token-weighted mean, resampling whole clusters (documents) with replacement.

    Each replicate is Σ(cluster sums) / Σ(cluster token counts) over the drawn clusters, so long documents
    keep their weight, as in the point estimate. Seeded: the same data gives the same interval.
    """
    values = np.asarray(values, dtype=np.float64)
    clusters = np.asarray(clusters)
    if values.size == 0:
        return Interval(math.nan, math.nan, "cluster-bootstrap", level)
    _, inverse = np.unique(clusters, return_inverse=True)
    sums = np.bincount(inverse, weights=values)
    counts = np.bincount(inverse).astype(np.float64)
    k = sums.size
    rng = np.random.default_rng(seed)
    est = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(k, 1))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        draws = rng.integers(0, k, size=(stop - start, k))
        est[start:stop] = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    return percentile_interval(est, level, "cluster-bootstrap")


def paired_bootstrap_ratio(num: np.ndarray, den: np.ndarray, *, n_boot: int = DEFAULT_BOOTSTRAP,
                           seed: int = DEFAULT_SEED, level: float = 0.95) -> Interval:
    """Percentile CI of Σnum/Σden resampling paired items (used for recovery = acc_candidate / acc_reference)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    n = num.size
    if n == 0:
        return Interval(math.nan, math.nan, "paired-bootstrap", level)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_boot, n))
    top = num[draws].sum(axis=1)
    bottom = den[draws].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1), np.nan)
    est = est[np.isfinite(est)]
    return percentile_interval(est, level, "paired-bootstrap")


def percentile_interval(replicates: np.ndarray, level: float, method: str) -> Interval:
    """The two-sided percentile interval of bootstrap replicates: their (1 - level)/2 and (1 + level)/2
    quantiles (2.5 % and 97.5 % for 95 %), numpy's default linear interpolation; NaN bounds with no replicate."""
    if replicates.size == 0:
        return Interval(math.nan, math.nan, method, level)
    tail = (1 - level) / 2
    lo, hi = np.quantile(replicates, [tail, 1 - tail])
    return Interval(float(lo), float(hi), method, level)
