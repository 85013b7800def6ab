"""Warnings a calibration report must carry: an early exit that turned itself off, keep rates off target.

Why: both failures are silent otherwise. With too few Judge keepers (or rejects) in the calibration
sample no rank keeps the keeper-loss promise, `tau_drop_for_loss` returns -inf and every document
reaches the Judge (the cascade saves nothing); and a per-source τ_keep fitted on a calibration
sample unlike the held-out documents can realise 12% where 30% was asked. Each warning is logged
and stored in the report's `warnings`, which the stage summary and the tracker show.
"""

from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

# a realised keep rate further than this share of its target from it is reported (0.30 asked: below
# 0.20 or above 0.40); sampling noise on a few hundred held-out documents stays well inside it
KEEP_RATE_TOLERANCE = 1 / 3


def calibration_warnings(report: dict) -> list[str]:
    """The warnings for a calibrate report (`build_report`'s dict): early exits off, keep rates off target."""
    out: list[str] = []
    cal = report.get("calibration", {})
    for rubric, tau in sorted(report.get("tau_drop", {}).items()):
        if tau == -math.inf:
            n = cal.get("keepers_per_tau_drop", {}).get(rubric, 0)
            out.append(f"early exit off for {rubric}: no τ_drop keeps the keeper-loss promise with {n} Judge keepers "
                       "in the calibration sample (every document reaches the Judge); calibrate on more documents "
                       "or raise scorer.calibration.max_keeper_loss")
    for source, r in sorted(report.get("keep_rate", {}).items()):
        target, realised = r.get("target"), r.get("realised")
        if target and realised is not None and abs(realised - target) > KEEP_RATE_TOLERANCE * target:
            out.append(f"keep rate of {source} misses its target: {realised:.0%} kept on {r.get('n', '?')} held-out "
                       f"documents vs {target:.0%} asked (τ_keep was fitted on {cal.get('fitted_on', 'the calibration sample')})")
    return out


def attach_warnings(report: dict) -> dict:
    """Log each warning and store the list in `report["warnings"]`; returns the report."""
    report["warnings"] = calibration_warnings(report)
    for w in report["warnings"]:
        log.warning(w)
    return report
