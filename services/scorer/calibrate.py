"""Calibration: keep thresholds per source, the Probe's drop threshold, and the agreement report.

- τ_keep per source: the (1 − target) quantile of the Judge's aggregate quality on held-out
  labelled documents of that source, so the realised keep rate hits the target (defaults ≈30%
  web, ≈50% code/math/science: `scorer.calibration.keep_rate_<kind>`).
- τ_drop on the Probe margin `probe_quality − τ_keep(source)`: the largest margin threshold whose
  loss of the documents the Judge alone would keep, on documents it was not fitted on, is at
  most `max_keeper_loss` (default 1%) with probability `keeper_loss_confidence` (default 0.9;
  0 = in expectation), split-conformal; every document under it skips the Judge's layers and
  head, which is the compute the cascade saves. Why a margin and not the Probe's score: τ_keep
  differs by source (a keep rate per source), so a keeper of a weak source can score below many
  rejects of a strong one, and one score threshold per rubric must sit under the weakest source's
  keepers — it dropped 1–3% of the demo's documents. Measured against its own source's bar, a
  strong source's clear rejects drop too. `calibration.tau_drop_scope` = `all` (default) fits
  one margin threshold on the keepers of every rubric (key `all-rubrics`), `rubric` one per rubric: the
  conformal promise needs ≥ 230 keepers per fit at 90% confidence, which a 1,500-document
  calibration sample gives all rubrics together but not always the code rubric alone.
- τ_accept, the same rule from the other side: the smallest margin threshold above which the
  cascade keeps a document on the Probe's word, without the Judge, while keeping at most
  `max_false_keep` (default 1%) of the documents the Judge alone would reject, with the same
  confidence; fitted on the Judge's rejects' margins. Why both exits: a document far above its
  bar is as settled at the Probe as one far below it, and at the demo's scale the Probe's
  rejects alone are too few to pay for the Probe.

Neither threshold needs oracle labels, only the heads' scores, so `fit_thresholds` runs on an
unlabelled calibration sample as large as `scorer.calibration.sample_size`, and the labelled
held-out split stays out of the fit: every figure in the report is measured on documents the
thresholds never saw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import beta as beta_dist
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


def conformal_rank(n_keepers: int, max_loss: float, confidence: float = 0.0) -> int:
    """How many of n calibration keepers' lowest Probe scores τ_drop may reach (0 = drop nothing).

    Skipping documents whose Probe score is under the j-th lowest of n calibration keepers loses a
    new keeper (exchangeable with them) with probability j/(n+1): its rank among the n+1 is
    uniform (split conformal). `confidence` = 0 bounds that in expectation: j = ⌊max_loss·(n+1)⌋.
    But for the one calibration sample at hand the loss is itself random, Beta(j, n+1−j)
    distributed, and exceeds its mean about half the time; `confidence` = 0.9 takes the largest j
    whose Beta 90% quantile is at most `max_loss` (a training-conditional guarantee, Vovk 2012), so
    nine calibration samples in ten keep the promise. At 1% that needs ≥ 99 keepers in
    expectation, ≥ 230 at 90%.
    """
    if confidence <= 0:
        return int(math.floor(max_loss * (n_keepers + 1) + 1e-9))
    j = 0
    while j < n_keepers and beta_dist.ppf(confidence, j + 1, n_keepers - j) <= max_loss:
        j += 1
    return j


def tau_drop_for_loss(probe_scores_of_keepers: np.ndarray, max_loss: float, confidence: float = 0.0) -> float:
    """Largest τ_drop whose keeper loss on *new* documents is at most `max_loss` (conformal_rank says
    in what sense); −∞ (every document reaches the Judge) when no rank keeps the promise."""
    p = np.sort(np.asarray(probe_scores_of_keepers, dtype=np.float64))
    j = conformal_rank(len(p), max_loss, confidence)
    return float(p[j - 1]) if j >= 1 else -math.inf


def tau_accept_for_rate(probe_scores_of_rejects: np.ndarray, max_rate: float, confidence: float = 0.0) -> float:
    """Smallest τ_accept whose share of *new* Judge rejects the Probe keeps (margin above it) is at most
    `max_rate`: `tau_drop_for_loss` mirrored onto the rejects' highest margins; +∞ (the Probe keeps
    nothing on its own) when no rank keeps the promise."""
    return -tau_drop_for_loss(-np.asarray(probe_scores_of_rejects, dtype=np.float64), max_rate, confidence)


def expected_keeper_loss(n_keepers: int, max_loss: float, quantile: float | None = None,
                         confidence: float = 0.0) -> float:
    """The keeper loss `tau_drop_for_loss` gives new documents with n calibration keepers.

    Over calibration samples the loss is Beta(j, n+1−j) with j = conformal_rank(...): its mean
    j/(n+1), or with `quantile` (e.g. 0.9) the loss this sample stays under with that probability.
    A tighter promise needs more keepers, not a different rule.
    """
    j = conformal_rank(n_keepers, max_loss, confidence)
    if j == 0:
        return 0.0
    if quantile is None:
        return j / (n_keepers + 1)
    return float(beta_dist.ppf(quantile, j, n_keepers + 1 - j))


POOLED = "all-rubrics"  # τ_drop key of the one threshold fitted on every rubric's keepers (a tracker-safe name)


@dataclass
class Thresholds:
    """τ_keep per source (and per `kind:<kind>` as the fallback for unseen sources), τ_drop and
    τ_accept on the Probe margin per rubric (or `POOLED` for all), and what they were fitted on:
    documents per source, Judge keepers and rejects per rubric."""

    tau_keep: dict[str, float]
    tau_drop: dict[str, float]
    docs_per_source: dict[str, int]
    keepers_per_rubric: dict[str, int]
    tau_accept: dict[str, float] = field(default_factory=dict)
    rejects_per_rubric: dict[str, int] = field(default_factory=dict)

    def keep_threshold(self, source: str, kind: str) -> float:
        return self.tau_keep.get(source, self.tau_keep.get(f"kind:{kind}", math.inf))

    def drop_threshold(self, rubric: str) -> float:
        return self.tau_drop.get(rubric, self.tau_drop.get(POOLED, -math.inf))

    def accept_threshold(self, rubric: str) -> float:
        return self.tau_accept.get(rubric, self.tau_accept.get(POOLED, math.inf))


def fit_thresholds(judge_q: np.ndarray, probe_q: np.ndarray, sources: np.ndarray, kinds: np.ndarray,
                   rubrics: np.ndarray, keep_rate: Callable[[str], float], max_loss: float,
                   confidence: float = 0.0, scope: str = "all", max_false_keep: float = 0.0) -> Thresholds:
    """τ_keep per source and per kind from the Judge's scores, then τ_drop (per rubric, or one for
    `scope="all"`) from the Probe margins of the documents those τ_keep keep, and τ_accept from
    those of the documents they reject (+∞ with `max_false_keep` 0). Arrays are per document."""
    if len(judge_q) == 0:
        raise ValueError("cannot calibrate thresholds on zero documents")
    if scope not in ("all", "rubric"):
        raise ValueError(f"scope={scope!r}; expected all or rubric")
    sources, kinds, rubrics = (np.asarray(a).astype(str) for a in (sources, kinds, rubrics))
    tau_keep: dict[str, float] = {}
    for src in sorted(set(sources.tolist())):
        m = sources == src
        tau_keep[src] = tau_for_keep_rate(judge_q[m], keep_rate(str(kinds[m][0])))
    for kind in sorted(set(kinds.tolist())):
        tau_keep[f"kind:{kind}"] = tau_for_keep_rate(judge_q[kinds == kind], keep_rate(kind))
    bar = np.array([tau_keep[s] for s in sources])
    keep, margin = judge_q >= bar, probe_q - bar
    keepers = {r: int(((rubrics == r) & keep).sum()) for r in sorted(set(rubrics.tolist()))}
    rejects = {r: int(((rubrics == r) & ~keep).sum()) for r in keepers}
    fits = {POOLED: np.ones(len(keep), dtype=bool)} if scope == "all" else {r: rubrics == r for r in keepers}
    tau_drop = {k: tau_drop_for_loss(margin[m & keep], max_loss, confidence) for k, m in fits.items()}
    tau_accept = {k: tau_accept_for_rate(margin[m & ~keep], max_false_keep, confidence) for k, m in fits.items()}
    return Thresholds(tau_keep, tau_drop, {s: int((sources == s).sum()) for s in sorted(set(sources.tolist()))},
                      keepers, tau_accept, rejects)


def probe_margin(th: Thresholds, probe_q: np.ndarray, sources, kinds) -> np.ndarray:
    """`probe_q − τ_keep(source)` per document; NaN where no τ_keep applies, which no threshold settles."""
    bar = np.array([th.keep_threshold(s, k) for s, k in zip(sources, kinds, strict=True)])
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(bar), np.asarray(probe_q, dtype=np.float64) - bar, np.nan)


def drop_mask(th: Thresholds, probe_q: np.ndarray, sources, kinds, rubrics) -> np.ndarray:
    """Which documents the Probe drops under `th` (margin below τ_drop; never without a τ_keep)."""
    return probe_margin(th, probe_q, sources, kinds) < np.array([th.drop_threshold(r) for r in rubrics])


def accept_mask(th: Thresholds, probe_q: np.ndarray, sources, kinds, rubrics) -> np.ndarray:
    """Which documents the Probe keeps on its own under `th` (margin above τ_accept; never without a τ_keep)."""
    return probe_margin(th, probe_q, sources, kinds) > np.array([th.accept_threshold(r) for r in rubrics])


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
