"""One sentence per metric that says which arm won, by how much, and how sure we are.

The sentence is the decision a researcher acts on, so it is written the same way every time:
"curated beat raw by 0.031 eval/bpb, 95% t-interval [0.018, 0.044] (3 seeds)", with the improvement
and its interval signed so that larger is better whatever the metric's direction, or, when the
interval covers zero, "no difference detectable at this budget: about N seeds would be needed".
The interval is the paired Student-t interval (shared/stats/paired.py says why not a bootstrap).
N is the sample size of a paired two-sided t-test at the same level with 80% power,
n = ((t_{n−1, 1−α/2} + t_{n−1, power}) · sd / |mean|)², solved for n, from the differences
measured here (DataDecide and FineWeb use 2–3 seeds at small scale; this says when that is not
enough). When every seed gave exactly the same nonzero difference (accuracies moving by one item on
each seed), the spread is zero and a t-interval cannot be formed: the verdict names no winner and
says so, since two or three identical one-item moves are what chance gives most often.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from shared.stats.paired import Comparison

POWER = 0.8
# a mean difference below this fraction of its sd is float rounding of a zero mean, not an effect
ROUNDING = 1e-9
# past this many seeds the t quantiles are the normal ones to 1%: the closed form answers
MAX_SEEDS = 200


def seeds_needed(mean: float, sd: float, level: float = 0.95, power: float = POWER) -> int | None:
    """Seeds (paired) for a two-sided t-test at `level` to detect `mean` with `power`; None when the
    measured mean difference is zero, or zero to rounding against its spread (differences of
    +1/n and −1/n accuracy average to ~1e-17, not 0): there is no effect to detect."""
    if not math.isfinite(mean) or abs(mean) <= ROUNDING * sd or mean == 0:
        return None
    from scipy.stats import t

    n = 2
    while n < MAX_SEEDS:  # the t quantiles shrink as n grows, so the first n that suffices is the answer
        z = t.ppf(1 - (1 - level) / 2, n - 1) + t.ppf(power, n - 1)
        if n >= (z * sd / abs(mean)) ** 2:
            return n
        n += 1
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) + NormalDist().inv_cdf(power)
    return max(MAX_SEEDS, math.ceil((z * sd / abs(mean)) ** 2))


def verdict_line(metric: str, arm: str, baseline: str, comp: Comparison, higher_is_better: bool) -> str:
    """The verdict sentence for arm − baseline on `metric` (see the module docstring)."""
    sign = 1.0 if higher_is_better else -1.0
    gain, lo, hi = sign * comp.mean, *sorted((sign * comp.low, sign * comp.high))
    pct = f"{comp.level:.0%}"
    n = len(comp.seeds)
    if n > 1 and comp.sd == 0 and comp.mean != 0:
        return (f"{arm} vs {baseline} on {metric}: no interval (every one of the {n} seeds gave the same "
                f"difference, {gain:+.4g} for {arm}, so there is no spread to scale): no winner named; "
                "more seeds or a finer-grained metric would tell")
    if comp.excludes_zero:
        winner, loser = (arm, baseline) if gain > 0 else (baseline, arm)
        if gain < 0:
            gain, lo, hi = -gain, -hi, -lo
        return (f"{winner} beat {loser} by {gain:.4g} {metric}, {pct} t-interval [{lo:.4g}, {hi:.4g}] "
                f"({n} seed{'s' if n != 1 else ''})")
    needed = seeds_needed(comp.mean, comp.sd, comp.level)
    if needed is None:
        tail = ("the arms measured the same on every seed" if comp.sd == 0 else
                "the mean difference is zero, so no number of seeds would put one arm ahead")
    else:
        tail = f"about {max(needed, n + 1)} seeds would be needed"
    return (f"{arm} vs {baseline} on {metric}: no difference detectable at this budget "
            f"(mean {gain:+.4g} for {arm}, {pct} t-interval [{lo:.4g}, {hi:.4g}], {n} seeds): {tail}")
