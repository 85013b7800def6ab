"""Token-horizon law: the optimal LR against the training budget, fitted on proxies, extrapolated.

For each token budget an LR sweep at one width gives lr* (parabola in ln lr around the best
point, `fit.parabola_optimum`); then ln(lr*) = a + b·ln(tokens) by linear regression
(`fit.fit_power_law`), the recipe a 155B-total/17B-active MoE reported extrapolating to 10T tokens
with R² = 0.95. Optima at the edge of their LR grid are not located and are left out of the fit
(reported, so the grid can be widened).
"""

from __future__ import annotations

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
    return LawResult(points, excluded, fit_power_law([t for t, _ in points], [o.lr for _, o in points]))


def law_report(law: LawResult, target_tokens: float, level: float = 0.9) -> str:
    """Plain-text summary: the fit, its R², the points and the predicted LR for the target budget."""
    f = law.fit
    lr, lo, hi = f.predict(target_tokens, level)
    lines = [f"ln(lr*) = a + b·ln(tokens):  a = {f.a:.3f} ± {f.a_se:.3f},  b = {f.b:.3f} ± {f.b_se:.3f},  "
             f"R² = {f.r2:.3f}  (n = {f.n} budgets)"]
    for t, o in law.points:
        lines.append(f"  tokens {t:>12,}  lr* = {o.lr:.4g}  (best grid lr {o.best_grid_lr:.3g}, loss {o.loss:.4f})")
    for t, o in law.excluded:
        lines.append(f"  tokens {t:>12,}  excluded: best grid lr {o.best_grid_lr:.3g} is at the grid edge")
    lines.append(f"predicted lr* at {target_tokens:,.0f} tokens: {lr:.4g}  ({level:.0%} prediction interval {lo:.4g} – {hi:.4g})")
    return "\n".join(lines)
