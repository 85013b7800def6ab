"""Calibration: keep thresholds per source, the Probe's drop threshold, and the agreement report.

- τ_keep per source: the (1 − target) quantile of the Judge's aggregate quality on held-out
  labelled documents of that source, so the realised keep rate hits the target (defaults ≈30%
  web, ≈50% code/math/science, from the design notes).
- τ_drop per rubric: the largest Probe threshold that drops at most `max_keeper_loss` (default
  1%) of the documents the Judge alone would keep; every document under it skips the Judge's
  layers and head, which is the compute the cascade saves.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import spearmanr


def tau_for_keep_rate(scores: np.ndarray, rate: float) -> float:
    """Threshold τ with mean(scores >= τ) as close to `rate` as the data allow."""
    s = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    if len(s) == 0:
        raise ValueError("cannot calibrate a keep threshold on zero documents")
    k = int(round(rate * len(s)))
    if k <= 0:
        return float(np.nextafter(s[0], np.inf))
    return float(s[min(k, len(s)) - 1])


def tau_drop_for_loss(probe_scores_of_keepers: np.ndarray, max_loss: float) -> float:
    """Largest τ_drop with mean(probe < τ_drop) over the Judge's keepers <= max_loss."""
    p = np.sort(np.asarray(probe_scores_of_keepers, dtype=np.float64))
    if len(p) == 0:
        return -math.inf
    allowed = int(math.floor(max_loss * len(p) + 1e-9))
    return float(p[allowed]) if allowed < len(p) else float(np.nextafter(p[-1], np.inf))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.std(a) == 0 or np.std(b) == 0:
        return 0.0
    return float(spearmanr(a, b).statistic)


def per_dim_spearman(pred: np.ndarray, true: np.ndarray, dims: tuple[str, ...]) -> dict[str, float]:
    return {d: spearman(pred[:, j], true[:, j]) for j, d in enumerate(dims)}


def mae_per_class(pred: np.ndarray, true: np.ndarray, max_score: int) -> dict[str, float]:
    """MAE (in rubric points) of predictions grouped by the oracle's integer score, all dimensions pooled."""
    p, t = (pred * max_score).ravel(), (true * max_score).round().astype(int).ravel()
    return {str(c): float(np.abs(p[t == c] - c).mean()) for c in sorted(set(t.tolist()))}


def f1(pred_keep: np.ndarray, true_keep: np.ndarray) -> float:
    tp = float(np.sum(pred_keep & true_keep))
    denom = float(np.sum(pred_keep) + np.sum(true_keep))
    return 2 * tp / denom if denom else 1.0


def length_baseline(lengths_train, y_train, lengths_test) -> np.ndarray:
    """Least-squares fit of every dimension on log(characters): the length-only baseline."""
    x_tr = np.stack([np.ones(len(lengths_train)), np.log1p(lengths_train)], 1)
    x_te = np.stack([np.ones(len(lengths_test)), np.log1p(lengths_test)], 1)
    coef, *_ = np.linalg.lstsq(x_tr, y_train, rcond=None)
    return x_te @ coef
