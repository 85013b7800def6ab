"""The two fits behind LR transfer: a parabola in log-LR per sweep, and a power law over token budgets.

1. Optimal LR of one sweep: loss is close to a parabola in log(lr) near its minimum (the shape
   the LR-sensitivity studies report, e.g. Wortsman et al. 2023, arXiv:2309.14322), so we fit
   `loss = c0 + c1·x + c2·x²` with x = ln(lr) over the best grid point and its neighbours (one on
   each side by default: parabolic interpolation, which follows a sharp minimum better than a
   least-squares fit over a wider window; pass more for noisy sweeps) and take x* = −c1 / (2·c2). A best point at the edge of the grid or a fit with no curvature cannot locate
   a minimum: the result says so (`bracketed=False`) and falls back to the best grid point.
2. Token-horizon law: ln(lr*) = a + b·ln(tokens) by least squares (the linear regression a
   155B-total/17B-active MoE used to extrapolate its optimal LR from small proxies to 10T tokens,
   reported R² = 0.95). We report a, b, R², their standard errors and a Student-t prediction
   interval for a new budget: ŷ ± t(n−2)·s·√(1 + 1/n + (x₀ − x̄)²/Sxx). When each optimum comes
   with a standard error (a bootstrap over seeds, `bootstrap_optimum`), the fit is weighted by
   1/se² and the interval adds the new point's own expected error: the parabola's uncertainty is
   carried into the law instead of being mistaken for scatter around it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class ParabolaOptimum:
    """The optimal LR of one sweep and how it was found."""

    lr: float  # optimal learning rate (exp of the parabola's vertex, or the best grid point)
    loss: float  # fitted loss at the optimum (the grid loss when not bracketed)
    best_grid_lr: float  # the grid point with the lowest loss
    bracketed: bool  # True when the vertex lies inside the fitted points and the parabola opens upward
    points_used: int  # grid points in the fit
    ln_lr_se: float | None = None  # standard error of ln(lr) over seeds (bootstrap), when ≥ 2 seeds
    seeds: int = 1
    bootstrap_rounds: int = 0  # resamples behind ln_lr_se (every one fitted)

    def as_dict(self) -> dict:
        return asdict(self)


def parabola_optimum(lrs: Sequence[float], losses: Sequence[float], neighbours: int = 1) -> ParabolaOptimum:
    """Fit a parabola in ln(lr) to the best point and up to `neighbours` grid points on each side.

    Non-finite losses (diverged runs) are dropped first; at least three finite points are needed.
    """
    pairs = sorted((float(lr), float(loss)) for lr, loss in zip(lrs, losses, strict=True) if math.isfinite(loss))
    if any(lr <= 0 for lr, _ in pairs):
        raise ValueError(f"learning rates must be positive, got {[lr for lr, _ in pairs]}")
    if len(pairs) < 3:
        raise ValueError(f"a parabola fit needs at least 3 finite (lr, loss) points, got {len(pairs)}; widen the LR grid")
    grid = [lr for lr, _ in pairs]
    x = np.log(grid)
    y = np.array([loss for _, loss in pairs])
    best = int(np.argmin(y))
    lo, hi = max(0, best - neighbours), min(len(x), best + neighbours + 1)
    if hi - lo < 3:  # best point at an edge: take the three nearest points anyway
        lo, hi = (0, 3) if best < len(x) // 2 else (len(x) - 3, len(x))
    xs, ys = x[lo:hi], y[lo:hi]
    c2, c1, c0 = np.polyfit(xs, ys, 2)
    at_edge = best in (0, len(x) - 1)
    if c2 <= 0 or at_edge:
        return ParabolaOptimum(grid[best], float(y[best]), grid[best], False, len(xs))
    vertex = float(-c1 / (2 * c2))
    vertex = min(max(vertex, float(xs[0])), float(xs[-1]))  # never extrapolate past the fitted points
    return ParabolaOptimum(
        float(math.exp(vertex)), float(c0 + c1 * vertex + c2 * vertex**2), grid[best], True, len(xs)
    )


def bootstrap_optimum(lrs: Sequence[float], losses_by_seed: Sequence[Sequence[float]], rounds: int = 200,
                      neighbours: int = 1, seed: int = 0) -> ParabolaOptimum:
    """The parabola optimum of the per-LR mean over seeds, with the standard error of ln(lr*) from
    resampling the seeds (with replacement, independently per LR). `losses_by_seed[i][j]` is seed
    j's loss at lrs[i]; a non-finite loss (diverged) makes that LR's mean non-finite.

    Every resample is fitted, or the call fails: dropping the rounds that could not be fitted would
    compute the spread over the stable draws only and understate it. A resample draws only seeds
    the table has, so each LR whose seeds are all finite stays finite in it, and the three such LRs
    the centre fit needed are there in every round; a round that still fails is an error worth
    seeing, raised with the round it happened in."""
    table = np.asarray(losses_by_seed, dtype=float)
    if table.ndim != 2 or table.shape[0] != len(lrs):
        raise ValueError("losses_by_seed needs one row of per-seed losses per learning rate")
    center = parabola_optimum(lrs, table.mean(axis=1), neighbours)
    n_seeds = table.shape[1]
    if n_seeds < 2:
        return center
    rng = np.random.default_rng(seed)
    vertices = []
    for r in range(rounds):
        pick = rng.integers(0, n_seeds, size=table.shape)
        sample = np.take_along_axis(table, pick, axis=1).mean(axis=1)
        try:
            vertices.append(math.log(parabola_optimum(lrs, sample, neighbours).lr))
        except ValueError as exc:
            raise ValueError(f"bootstrap resample {r + 1} of {rounds} could not be fitted ({exc}); its per-LR means "
                             f"were {sample.tolist()}") from exc
    se = float(np.std(vertices, ddof=1)) if len(vertices) > 1 else None
    return ParabolaOptimum(center.lr, center.loss, center.best_grid_lr, center.bracketed, center.points_used, se, n_seeds,
                           len(vertices))


@dataclass(frozen=True)
class PowerLawFit:
    """ln(lr*) = a + b·ln(tokens), fitted by least squares."""

    a: float
    b: float
    r2: float
    a_se: float
    b_se: float
    residual_std: float  # s, the residual standard deviation in ln(lr) (n − 2 degrees of freedom)
    n: int
    x_mean: float
    sxx: float
    weighted: bool = False  # weighted by 1/se² of each optimum
    point_se: float = 0.0  # typical standard error of one optimum (weighted fits), added to a prediction

    def predict(self, tokens: float, level: float = 0.9) -> tuple[float, float, float]:
        """(lr, low, high): the predicted optimal LR for `tokens` and its `level` prediction interval."""
        if tokens <= 0:
            raise ValueError(f"token budget must be positive, got {tokens}")
        x0 = math.log(tokens)
        y0 = self.a + self.b * x0
        if self.n <= 2 or not math.isfinite(self.residual_std):
            return math.exp(y0), float("nan"), float("nan")
        t = float(stats.t.ppf(0.5 + level / 2, self.n - 2))
        line = self.residual_std**2 * (1 / self.n + (x0 - self.x_mean) ** 2 / self.sxx)
        new_point = self.residual_std**2 if not self.weighted else max(self.residual_std**2, self.point_se**2)
        half = t * math.sqrt(line + new_point)
        return math.exp(y0), math.exp(y0 - half), math.exp(y0 + half)

    def as_dict(self) -> dict:
        return asdict(self)


def fit_power_law(tokens: Sequence[float], lrs: Sequence[float], ln_se: Sequence[float | None] | None = None) -> PowerLawFit:
    """Least-squares fit of ln(lr) on ln(tokens); needs at least 2 distinct budgets (3 for an interval).

    With `ln_se` (each point's standard error in ln lr; all given) the fit is weighted by 1/se².
    """
    if len(tokens) != len(lrs):
        raise ValueError(f"tokens ({len(tokens)}) and lrs ({len(lrs)}) must have the same length")
    if any(t <= 0 for t in tokens) or any(lr <= 0 for lr in lrs):
        raise ValueError("token budgets and learning rates must be positive")
    x, y = np.log(np.asarray(tokens, float)), np.log(np.asarray(lrs, float))
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        raise ValueError(f"the law needs at least 2 distinct token budgets, got {sorted(set(tokens))}")
    weighted = ln_se is not None and all(se is not None and se > 0 for se in ln_se)
    se_arr = np.asarray(ln_se, float) if weighted else np.ones(n)
    w = 1.0 / se_arr**2
    w = w / w.mean()  # relative weights: the residual scale s stays in units of ln(lr)
    x_mean = float((w * x).sum() / w.sum())
    y_mean = float((w * y).sum() / w.sum())
    sxx = float((w * (x - x_mean) ** 2).sum())
    b = float((w * (x - x_mean) * (y - y_mean)).sum() / sxx)
    a = float(y_mean - b * x_mean)
    resid = y - (a + b * x)
    ss_res, ss_tot = float((w * resid**2).sum()), float((w * (y - y_mean) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    s = math.sqrt(ss_res / (n - 2)) if n > 2 else float("nan")
    b_se = s / math.sqrt(sxx)
    a_se = s * math.sqrt(1 / n + x_mean**2 / sxx)
    point_se = float(np.sqrt(np.mean(se_arr**2))) if weighted else 0.0
    return PowerLawFit(a, b, r2, a_se, b_se, s, n, x_mean, sxx, weighted, point_se)
