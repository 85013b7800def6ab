"""Reading a sweep: the loss grid, the optimal LR per (budget, parameterisation, width), and its drift.

muP's promise (Yang et al. 2022, Fig. 1) is that the optimal LR found at a small width stays
optimal at larger widths, while under standard parameterisation it moves (for Adam-like updates,
roughly ∝ 1/width). We measure it as the slope of ln(lr*) against ln(width): ≈ 0 means the LR
transfers, ≈ −1 means it must shrink with width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.trainer.hparam.fit import ParabolaOptimum, bootstrap_optimum, fit_power_law
from services.trainer.hparam.sweep import TrialResult


def optimal_lrs(results: Sequence[TrialResult]) -> dict[tuple[int, bool, int], ParabolaOptimum]:
    """{(tokens, mup, width): the parabola-fit optimum of that LR sweep} for every sweep with ≥ 3 LRs.

    With several seeds the parabola is fitted to the per-LR mean loss over the seeds every LR has,
    and the optimum carries a bootstrap standard error of ln(lr*) over those seeds."""
    groups: dict[tuple[int, bool, int], dict[float, dict[int, float]]] = {}
    for r in results:
        groups.setdefault((r.tokens, r.mup, r.width), {}).setdefault(r.lr, {})[r.seed] = r.loss
    out = {}
    for key, by_lr in sorted(groups.items()):
        seeds = sorted(set.intersection(*(set(v) for v in by_lr.values())))
        if not seeds:
            continue
        lrs = sorted(by_lr)
        table = [[by_lr[lr][s] for s in seeds] for lr in lrs]
        if sum(all(math.isfinite(v) for v in row) for row in table) >= 3:
            out[key] = bootstrap_optimum(lrs, table)
    return out


@dataclass(frozen=True)
class Drift:
    tokens: int
    mup: bool
    widths: tuple[int, ...]
    lrs: tuple[float, ...]
    slope: float  # d ln(lr*) / d ln(width)
    spread_octaves: float  # log2(max lr* / min lr*) across widths


def lr_drift(optima: dict[tuple[int, bool, int], ParabolaOptimum]) -> list[Drift]:
    """Per (budget, parameterisation): how the optimal LR moves across widths."""
    by: dict[tuple[int, bool], list[tuple[int, float]]] = {}
    for (tokens, mup, width), opt in optima.items():
        by.setdefault((tokens, mup), []).append((width, opt.lr))
    out = []
    for (tokens, mup), pts in sorted(by.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        pts.sort()
        if len(pts) < 2:
            continue
        widths, lrs = zip(*pts, strict=True)
        slope = fit_power_law(widths, lrs).b
        out.append(Drift(tokens, mup, widths, lrs, slope, math.log2(max(lrs) / min(lrs))))
    return out


def sweep_table(results: Sequence[TrialResult]) -> str:
    """Markdown: one row per (budget, parameterisation, width), the loss at each LR (the mean over
    its seeds; "diverged" if any seed diverged), the seed count, and the optimum."""
    lrs = sorted({r.lr for r in results})
    optima = optimal_lrs(results)
    cell: dict[tuple[int, bool, int, float], list[TrialResult]] = {}
    for r in results:
        cell.setdefault((r.tokens, r.mup, r.width, r.lr), []).append(r)
    rows = sorted({(r.tokens, r.mup, r.width) for r in results}, key=lambda k: (k[0], not k[1], k[2]))
    lines = ["| tokens | param | width | seeds | " + " | ".join(f"lr={lr:.3g}" for lr in lrs) + " | lr* (parabola) |",
             "|---:|---|---:|---:|" + "---:|" * (len(lrs) + 1)]
    for tokens, mup, width in rows:
        vals, best = [], optima.get((tokens, mup, width))
        for lr in lrs:
            rs = cell.get((tokens, mup, width, lr))
            if rs is None:
                vals.append("-")
                continue
            text = "diverged" if any(r.diverged for r in rs) else f"{sum(r.loss for r in rs) / len(rs):.4f}"
            vals.append(f"**{text}**" if best is not None and lr == best.best_grid_lr else text)
        seeds = max(len(v) for k, v in cell.items() if k[:3] == (tokens, mup, width))
        star = "-" if best is None else f"{best.lr:.3g}" + ("" if best.bracketed else " (edge)")
        lines.append(f"| {tokens:,} | {'muP' if mup else 'SP'} | {width} | {seeds} | " + " | ".join(vals) + f" | {star} |")
    return "\n".join(lines)


def drift_table(drifts: Sequence[Drift]) -> str:
    lines = ["| tokens | param | lr* per width | slope d ln lr*/d ln width | spread (octaves) |", "|---:|---|---|---:|---:|"]
    for d in drifts:
        per = ", ".join(f"{w}: {lr:.3g}" for w, lr in zip(d.widths, d.lrs, strict=True))
        lines.append(f"| {d.tokens:,} | {'muP' if d.mup else 'SP'} | {per} | {d.slope:+.2f} | {d.spread_octaves:.2f} |")
    return "\n".join(lines)
