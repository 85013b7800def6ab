"""Paired differences between two arms of an ablation and a Student-t 95% interval of their mean.

Why paired: arm A's seed k and arm B's seed k share the model initialisation and the data order
seed, so much of the seed-to-seed spread cancels in A_k − B_k (FineWeb and DataDecide compare data
recipes the same way, one identical proxy per variant and seed).

Why a t-interval and not a percentile bootstrap: an ablation has 2–5 seeds, and the percentile
bootstrap of a mean over so few values cannot reach past the smallest and largest difference. Over
3 seeds its "95%" interval is essentially [min, max], which misses the true mean whenever all three
differences fall on the same side of it: 2 · 0.5³ = 25% of the time, so it covers about 75%, not
95%. The t-interval, mean ± t_{n−1} · sd / √n, widens with the few degrees of freedom instead
(t = 4.30 at 3 seeds, 12.7 at 2); it assumes the differences are roughly normal, which a metric
averaged over many tokens or items is. One seed gives no spread and so an unbounded interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

METHOD = "student-t"


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
                "ci_low": self.low, "ci_high": self.high, "level": self.level, "interval": METHOD}


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value)."""
    if not values:
        raise ValueError("mean_sd of no values")
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def t_quantile(level: float, n: int) -> float:
    """The two-sided Student-t critical value at `level` for the mean of n values (n − 1 degrees of freedom)."""
    from scipy.stats import t

    return float(t.ppf(1 - (1 - level) / 2, n - 1))


def t_mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean of `values` at `level`: mean ± t_{n−1} · sd / √n.

    One value has no spread to scale: (−inf, inf). Values that are all equal give a point."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("interval of no values")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"interval values must be finite, got {arr.tolist()}")
    if arr.size == 1:
        return -math.inf, math.inf
    mean, sd = float(arr.mean()), float(arr.std(ddof=1))
    half = t_quantile(level, arr.size) * sd / math.sqrt(arr.size)
    return mean - half, mean + half


def compare_paired(arm: Mapping[int, float], baseline: Mapping[int, float], level: float = 0.95) -> Comparison:
    """arm − baseline, seed by seed, over the seeds both have; raises when they share none."""
    seeds = tuple(sorted(set(arm) & set(baseline)))
    if not seeds:
        raise ValueError(f"no seed finished in both arms (arm seeds {sorted(arm)}, baseline seeds {sorted(baseline)})")
    diffs = tuple(float(arm[s]) - float(baseline[s]) for s in seeds)
    mean, sd = mean_sd(diffs)
    low, high = t_mean_interval(diffs, level)
    return Comparison(seeds, diffs, mean, sd, low, high, level)
