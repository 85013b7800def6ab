"""A calibration report warns (logged and stored) when the early exit turns itself off or a keep rate misses its target."""

from __future__ import annotations

import logging
import math

from services.scorer.calibration_warnings import attach_warnings


def _report(tau_drop: float, realised: float) -> dict:
    return {"tau_drop": {"all-rubrics": tau_drop},
            "calibration": {"keepers_per_tau_drop": {"all-rubrics": 4}, "fitted_on": "40 unlabelled documents"},
            "keep_rate": {"web": {"target": 0.30, "realised": realised, "n": 200}}}


def test_early_exit_off_and_a_keep_rate_at_12_percent_of_30_are_warned(caplog):
    with caplog.at_level(logging.WARNING):
        report = attach_warnings(_report(-math.inf, 0.12))
    assert len(report["warnings"]) == 2
    assert "early exit off for all-rubrics" in report["warnings"][0] and "4 Judge keepers" in report["warnings"][0]
    assert "keep rate of web misses its target: 12% kept on 200 held-out documents vs 30% asked" in report["warnings"][1]
    assert caplog.text.count("early exit off") == 1 and "misses its target" in caplog.text


def test_a_working_early_exit_and_a_keep_rate_near_target_warn_nothing():
    assert attach_warnings(_report(-0.2, 0.27))["warnings"] == []
