"""One sentence per metric that says which arm won, by how much, and how sure we are.

The sentence is the decision a researcher acts on, so it is written the same way every time:
"curated beat raw by 0.031 eval/bpb, 95% interval [0.018, 0.044] (3 seeds)", with the improvement
and its interval signed so that larger is better whatever the metric's direction, or, when the
interval covers zero, "no difference detectable at this budget: about N seeds would be needed".
N is the usual normal-approximation sample size of a paired two-sided test at the same level
with 80% power, n = ((z_{1−α/2} + z_{power}) · sd / |mean|)², from the differences measured here
(DataDecide and FineWeb use 2–3 seeds at small scale; this says when that is not enough).
A win on 5 seeds or fewer carries how often every seed agrees by chance when the arms are equal
(2 · 0.5ⁿ: 50% at 2 seeds, 25% at 3), since that is when a percentile interval excludes zero.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from shared.stats.paired import Comparison

POWER = 0.8
# a mean difference below this fraction of its sd is float rounding of a zero mean, not an effect
ROUNDING = 1e-9


def seeds_needed(mean: float, sd: float, level: float = 0.95, power: float = POWER) -> int | None:
    """Seeds (paired) for a two-sided test at `level` to detect `mean` with `power`; None when the
    measured mean difference is zero, or zero to rounding against its spread (differences of
    +1/n and −1/n accuracy average to ~1e-17, not 0): there is no effect to detect."""
    if not math.isfinite(mean) or abs(mean) <= ROUNDING * sd or mean == 0:
        return None
    z = NormalDist().inv_cdf(1 - (1 - level) / 2) + NormalDist().inv_cdf(power)
    return max(2, math.ceil((z * sd / abs(mean)) ** 2))


def chance_all_agree(n: int) -> float:
    """Probability that n paired differences all share a sign when the arms are equal (each sign a
    fair coin): 2 · 0.5ⁿ. With n ≤ 3 seeds the exact percentile bootstrap interval spans the smallest
    to the largest difference, so it excludes zero exactly when they all agree."""
    return 2.0 * 0.5**n


def few_seeds_caveat(n: int, level: float) -> str:
    """A clause for a winning verdict on so few seeds that every seed agreeing is likelier by chance
    than the interval's own error rate (n ≤ 5 at 95%); empty otherwise."""
    p = chance_all_agree(n)
    if n < 1 or p <= 1 - level:
        return ""
    return f"; with {n} seeds every seed agrees by chance {p:.0%} of the time when the arms are equal"


def verdict_line(metric: str, arm: str, baseline: str, comp: Comparison, higher_is_better: bool) -> str:
    """The verdict sentence for arm − baseline on `metric` (see the module docstring)."""
    sign = 1.0 if higher_is_better else -1.0
    gain, lo, hi = sign * comp.mean, *sorted((sign * comp.low, sign * comp.high))
    pct = f"{comp.level:.0%}"
    n = len(comp.seeds)
    if comp.excludes_zero:
        winner, loser = (arm, baseline) if gain > 0 else (baseline, arm)
        if gain < 0:
            gain, lo, hi = -gain, -hi, -lo
        return (f"{winner} beat {loser} by {gain:.4g} {metric}, {pct} interval [{lo:.4g}, {hi:.4g}] "
                f"({n} seed{'s' if n != 1 else ''}){few_seeds_caveat(n, comp.level)}")
    needed = seeds_needed(comp.mean, comp.sd, comp.level)
    if needed is None:
        tail = ("the arms measured the same on every seed" if comp.sd == 0 else
                "the mean difference is zero, so no number of seeds would put one arm ahead")
    else:
        tail = f"about {max(needed, n + 1)} seeds would be needed"
    return (f"{arm} vs {baseline} on {metric}: no difference detectable at this budget "
            f"(mean {gain:+.4g} for {arm}, {pct} interval [{lo:.4g}, {hi:.4g}], {n} seeds): {tail}")
