"""PNG figures for the three hyper-parameter studies (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from services.trainer.hparam.analysis import optimal_lrs
from services.trainer.hparam.coord_check import CoordRecord, metric_order
from services.trainer.hparam.lr_law import LawResult
from services.trainer.hparam.sweep import TrialResult


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    _plt().close(fig)
    os.replace(tmp, path)
    return path


def plot_coord_check(records: Sequence[CoordRecord], path: str | os.PathLike) -> Path:
    """Rows: (optimizer, muP/SP). Columns: ΔW·x of a few hidden matrices (an attention projection,
    an expert's up and down matrices), the last block's FFN contribution and the logits.
    x = width (log), one line per step; one y-scale per column, so flat vs growing shows at a glance."""
    plt = _plt()
    metrics = {r.metric for r in records}

    def first(pattern: str) -> str | None:
        found = sorted((m for m in metrics if m.startswith("dWx/") and m.endswith(pattern)), key=metric_order)
        return found[0] if found else None

    last_ffn = max((m for m in metrics if m.startswith("act/ffn")), key=metric_order, default=None)
    panels = [p for p in (first("attn.wq.weight"), first("experts.w1_EFD"), first("experts.w2_EDF"), last_ffn, "logits")
              if p in metrics]
    rows = sorted({(r.optimizer, r.mup) for r in records}, key=lambda k: (k[0], not k[1]))
    steps = sorted({r.step for r in records})
    if len(steps) > 6:  # a readable legend: six steps spread over the run, the last included
        steps = sorted({steps[round(i * (len(steps) - 1) / 5)] for i in range(6)})
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(3.2 * len(panels), 2.7 * len(rows)), squeeze=False,
                             sharey="col", layout="constrained")
    cmap = plt.get_cmap("viridis")
    for i, (opt, mup) in enumerate(rows):
        for j, metric in enumerate(panels):
            ax = axes[i][j]
            for s in steps:
                pts = sorted((r.width, r.rms) for r in records
                             if (r.optimizer, r.mup, r.metric, r.step) == (opt, mup, metric, s))
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", color=cmap(s / max(steps[-1], 1)), label=f"t={s}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{opt}, {'muP' if mup else 'SP'}:\n{metric.removeprefix('dWx/')}", fontsize=8)
            ax.set_xlabel("width")
            if j == 0:
                ax.set_ylabel("RMS")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("coordinate check: ΔW·x per matrix and block outputs, flat in width under muP")
    return _save(fig, path)


def plot_sweep(results: Sequence[TrialResult], path: str | os.PathLike) -> Path:
    """Loss against LR, one line per width, one panel per (budget, parameterisation); stars at lr*."""
    plt = _plt()
    optima = optimal_lrs(results)
    panels = sorted({(r.tokens, r.mup) for r in results}, key=lambda k: (k[0], not k[1]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False, layout="constrained")
    cmap = plt.get_cmap("plasma")
    widths = sorted({r.width for r in results})
    for ax, (tokens, mup) in zip(axes[0], panels, strict=True):
        for k, w in enumerate(widths):
            pts = sorted((r.lr, r.loss) for r in results if r.tokens == tokens and r.mup == mup and r.width == w
                         and math.isfinite(r.loss))
            if not pts:
                continue
            color = cmap(k / max(len(widths) - 1, 1) * 0.85)
            ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=f"width {w}")
            opt = optima.get((tokens, mup, w))
            if opt is not None:
                ax.plot([opt.lr], [opt.loss], marker="*", markersize=13, color=color, markeredgecolor="k")
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final loss")
        ax.set_title(f"{'muP' if mup else 'SP'}, {tokens:,} tokens", fontsize=10)
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_law(law: LawResult, target_tokens: float, path: str | os.PathLike, level: float = 0.9) -> Path:
    """ln lr* against ln tokens: the proxies' optima, the fitted line, and the target's prediction interval."""
    import numpy as np

    plt = _plt()
    f = law.fit
    fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
    ax.scatter([t for t, _ in law.points], [o.lr for _, o in law.points], zorder=3, label="proxy optima (parabola)")
    if law.excluded:
        ax.scatter([t for t, _ in law.excluded], [o.best_grid_lr for _, o in law.excluded], marker="x", color="gray",
                   label="at grid edge (excluded)")
    xs = np.geomspace(min(t for t, _ in law.points), target_tokens, 64)
    preds = [f.predict(x, level) for x in xs]
    ax.plot(xs, [p[0] for p in preds], color="C1", label=f"fit: b = {f.b:.3f}, R² = {f.r2:.3f}")
    if all(math.isfinite(p[1]) for p in preds):
        ax.fill_between(xs, [p[1] for p in preds], [p[2] for p in preds], color="C1", alpha=0.2,
                        label=f"{level:.0%} prediction interval")
    lr, lo, hi = f.predict(target_tokens, level)
    ax.errorbar([target_tokens], [lr], yerr=[[lr - lo], [hi - lr]] if math.isfinite(lo) else None, fmt="D",
                color="C3", capsize=4, label=f"target: {lr:.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("optimal LR")
    ax.legend(fontsize=7)
    ax.set_title("optimal LR vs token budget")
    return _save(fig, path)
