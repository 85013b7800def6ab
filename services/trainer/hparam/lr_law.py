"""Token-horizon law: the optimal LR against the training budget, fitted on proxies, extrapolated.

For each token budget an LR sweep at one width gives lr* (parabola in ln lr around the best
point, `fit.parabola_optimum`); then ln(lr*) = a + b·ln(tokens) by linear regression
(`fit.fit_power_law`), the recipe a 155B-total/17B-active MoE reported extrapolating to 10T tokens
with R² = 0.95. Optima at the edge of their LR grid are not located and are left out of the fit
(reported, so the grid can be widened).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.trainer.hparam.analysis import optimal_lrs
from services.trainer.hparam.fit import ParabolaOptimum, PowerLawFit, fit_power_law
from services.trainer.hparam.sweep import TrialResult


@dataclass(frozen=True)
class LawResult:
    points: list[tuple[int, ParabolaOptimum]]  # (tokens, optimum) used in the fit
    excluded: list[tuple[int, ParabolaOptimum]]  # optima at a grid edge, left out
    fit: PowerLawFit


def fit_lr_law(results: Sequence[TrialResult], width: int, mup: bool) -> LawResult:
    """Fit the law on the sweeps at (`width`, `mup`), one sweep per token budget."""
    optima = {t: o for (t, m, w), o in optimal_lrs(results).items() if w == width and m == mup}
    points = sorted((t, o) for t, o in optima.items() if o.bracketed)
    excluded = sorted((t, o) for t, o in optima.items() if not o.bracketed)
    if len(points) < 2:
        raise ValueError(
            f"only {len(points)} token budget(s) have an optimal LR inside their LR grid (width {width}, "
            f"muP={'on' if mup else 'off'}); budgets at a grid edge: {[t for t, _ in excluded]}. "
            "Widen --lrs around the edge or add budgets."
        )
    se = [o.ln_lr_se for _, o in points]
    return LawResult(points, excluded, fit_power_law([t for t, _ in points], [o.lr for _, o in points],
                                                     se if all(s is not None for s in se) else None))


def law_report(law: LawResult, target_tokens: float, level: float = 0.9) -> str:
    """Plain-text summary: the fit, its R², the points and the predicted LR for the target budget."""
    f = law.fit
    lr, lo, hi = f.predict(target_tokens, level)
    lines = [f"ln(lr*) = a + b·ln(tokens):  a = {f.a:.3f} ± {f.a_se:.3f},  b = {f.b:.3f} ± {f.b_se:.3f},  "
             f"R² = {f.r2:.3f}  (n = {f.n} budgets{', weighted by 1/se²' if f.weighted else ''})"]
    for t, o in law.points:
        se = "" if o.ln_lr_se is None else f", ±{o.ln_lr_se:.2f} in ln lr over {o.seeds} seeds"
        lines.append(f"  tokens {t:>12,}  lr* = {o.lr:.4g}  (best grid lr {o.best_grid_lr:.3g}, loss {o.loss:.4f}{se})")
    for t, o in law.excluded:
        lines.append(f"  tokens {t:>12,}  excluded: best grid lr {o.best_grid_lr:.3g} is at the grid edge")
    lines.append(f"predicted lr* at {target_tokens:,.0f} tokens: {lr:.4g}  ({level:.0%} prediction interval {lo:.4g} – {hi:.4g})")
    return "\n".join(lines)


@dataclass(frozen=True)
class HoldoutCheck:
    """The law's prediction at a budget outside the fit, against a real sweep there."""

    tokens: int
    predicted_lr: float
    interval: tuple[float, float]
    measured: ParabolaOptimum  # the held-out sweep's optimum
    loss_at_prediction: float  # mean held-out loss of runs trained at the predicted LR
    best_loss: float  # the lowest mean loss of the held-out sweep's grid (prediction included)

    @property
    def inside_interval(self) -> bool:
        return self.interval[0] <= self.measured.lr <= self.interval[1]

    @property
    def loss_lost(self) -> float:
        """Relative loss lost by training at the predicted LR instead of the best measured one."""
        return self.loss_at_prediction / self.best_loss - 1.0

    def report(self) -> str:
        lo, hi = self.interval
        return (f"held-out budget {self.tokens:,} tokens: predicted lr* {self.predicted_lr:.4g} (interval {lo:.4g} – "
                f"{hi:.4g}), measured lr* {self.measured.lr:.4g}"
                + ("" if self.measured.ln_lr_se is None else f" (±{self.measured.ln_lr_se:.2f} in ln lr)")
                + f" — {'inside' if self.inside_interval else 'OUTSIDE'} the interval; loss at the prediction "
                f"{self.loss_at_prediction:.4f} vs best {self.best_loss:.4f}: {self.loss_lost:+.2%}")


def holdout_check(law: LawResult, results: Sequence[TrialResult], tokens: int, width: int, mup: bool,
                  level: float = 0.9) -> HoldoutCheck:
    """Compare the law's prediction for `tokens` (not in the fit) with the sweep trained there; the
    runs at exactly the predicted LR (in `results`) give the loss the prediction costs."""
    if any(t == tokens for t, _ in law.points):
        raise ValueError(f"budget {tokens} is in the fit; an out-of-sample check needs a budget outside it")
    lr, lo, hi = law.fit.predict(tokens, level)
    here = [r for r in results if r.tokens == tokens and r.width == width and r.mup == mup]
    measured = optimal_lrs(here).get((tokens, mup, width))
    if measured is None:
        raise ValueError(f"no usable sweep at the held-out budget {tokens} (need ≥ 3 finite LRs)")
    by_lr: dict[float, list[float]] = {}
    for r in here:
        by_lr.setdefault(r.lr, []).append(r.loss)
    means = {k: sum(v) / len(v) for k, v in by_lr.items()}
    at_pred = min(means, key=lambda k: abs(math.log(k / lr)))
    if abs(math.log(at_pred / lr)) > 1e-6:
        raise ValueError(f"no run at the predicted LR {lr:.6g} for budget {tokens}; train it first")
    return HoldoutCheck(tokens, lr, (lo, hi), measured, means[at_pred], min(means.values()))
