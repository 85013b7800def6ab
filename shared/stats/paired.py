"""Paired differences between two arms of an ablation and a bootstrap 95% interval of their mean.

Why paired: arm A's seed k and arm B's seed k share the model initialisation and the data order
seed, so much of the seed-to-seed spread cancels in A_k − B_k (FineWeb and DataDecide compare data
recipes the same way, one identical proxy per variant and seed). Why the bootstrap: it makes no
normality assumption about a handful of differences; with a handful (n ≤ `EXACT_MAX_N`) the
bootstrap distribution of the mean is computed exactly, by enumerating every resample as a
multiset with its multinomial weight, so the interval is deterministic and has a known answer in
tests; larger n uses a seeded Monte-Carlo resample. The percentile interval of a mean over very
few seeds is narrow by construction (it cannot reach beyond the smallest and largest difference),
which is why the verdict also states how many seeds a clear result would need.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

EXACT_MAX_N = 8  # C(2n-1, n) multisets: 6,435 at n = 8, 24,310 at n = 9
MONTE_CARLO_DRAWS = 20_000


@dataclass(frozen=True)
class Comparison:
    """Arm minus baseline over the seeds both finished: mean difference, its sd and interval."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    sd: float  # sample sd of the differences (0 with one seed)
    low: float
    high: float
    level: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict:
        return {"seeds": list(self.seeds), "differences": list(self.differences), "mean": self.mean, "sd": self.sd,
                "ci_low": self.low, "ci_high": self.high, "level": self.level}


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value)."""
    if not values:
        raise ValueError("mean_sd of no values")
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def _exact_bootstrap_means(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct bootstrap resample's mean with its probability (multinomial over n^n draws)."""
    n = len(values)
    means, weights = [], []
    log_total = n * math.log(n)
    for combo in itertools.combinations_with_replacement(range(n), n):
        counts = np.bincount(combo, minlength=n)
        log_ways = math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in counts)
        means.append(float(counts @ values) / n)
        weights.append(math.exp(log_ways - log_total))
    return np.asarray(means), np.asarray(weights)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value whose cumulative weight reaches q (the inverse CDF; no interpolation)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    cum /= cum[-1]
    idx = int(np.searchsorted(cum, q - 1e-12, side="left"))
    return float(values[order][min(idx, len(values) - 1)])


def bootstrap_mean_interval(values: Sequence[float], level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` at `level`.

    Exact (every resample, weighted) for n ≤ EXACT_MAX_N; else MONTE_CARLO_DRAWS resamples drawn
    with `seed`, so the same values always give the same interval."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("bootstrap of no values")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"bootstrap values must be finite, got {arr.tolist()}")
    tail = (1 - level) / 2
    if arr.size <= EXACT_MAX_N:
        means, weights = _exact_bootstrap_means(arr)
    else:
        rng = np.random.default_rng(seed)
        means = arr[rng.integers(0, arr.size, size=(MONTE_CARLO_DRAWS, arr.size))].mean(axis=1)
        weights = np.ones_like(means)
    return _weighted_quantile(means, weights, tail), _weighted_quantile(means, weights, 1 - tail)


def compare_paired(arm: Mapping[int, float], baseline: Mapping[int, float], level: float = 0.95) -> Comparison:
    """arm − baseline, seed by seed, over the seeds both have; raises when they share none."""
    seeds = tuple(sorted(set(arm) & set(baseline)))
    if not seeds:
        raise ValueError(f"no seed finished in both arms (arm seeds {sorted(arm)}, baseline seeds {sorted(baseline)})")
    diffs = tuple(float(arm[s]) - float(baseline[s]) for s in seeds)
    mean, sd = mean_sd(diffs)
    low, high = bootstrap_mean_interval(diffs, level)
    return Comparison(seeds, diffs, mean, sd, low, high, level)
