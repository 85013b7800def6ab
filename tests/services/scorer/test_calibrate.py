"""Calibration hits target keep rates on synthetic scores and bounds the cascade's keeper loss."""

from __future__ import annotations

import numpy as np
import pytest

from services.scorer import calibrate as cal
from shared.config import load_config
from shared.config.scorer import ScorerConfig


@pytest.mark.parametrize("dist", ["uniform", "beta", "bimodal"])
@pytest.mark.parametrize("rate", [0.3, 0.5, 0.1, 0.9])
def test_tau_keep_hits_target_keep_rate_within_two_points(dist, rate):
    rng = np.random.default_rng(0)
    draw = {"uniform": lambda n: rng.uniform(size=n), "beta": lambda n: rng.beta(2, 5, size=n),
            "bimodal": lambda n: np.concatenate([rng.normal(0.2, 0.05, n // 2), rng.normal(0.8, 0.05, n - n // 2)])}
    calib, fresh = draw[dist](2000), draw[dist](20000)
    tau = cal.tau_for_keep_rate(calib, rate)
    assert abs(np.mean(calib >= tau) - rate) <= 0.02
    assert abs(np.mean(fresh >= tau) - rate) <= 0.02  # also on unseen scores from the same distribution


def test_tau_drop_loses_at_most_the_allowed_fraction_of_keepers_and_skips_most_rejects():
    rng = np.random.default_rng(1)
    judge = rng.uniform(size=5000)
    probe = judge + rng.normal(0, 0.1, size=judge.size)  # a noisy early-exit estimate
    tau_keep = cal.tau_for_keep_rate(judge, 0.3)
    keepers = judge >= tau_keep
    tau_drop = cal.tau_drop_for_loss(probe[keepers], 0.01)
    loss = np.mean(probe[keepers] < tau_drop)
    assert loss <= 0.01
    assert np.mean(probe < tau_drop) > 0.4  # more than half of the 70% rejects skip the Judge


def test_tau_drop_with_zero_loss_keeps_every_keeper():
    probe = np.array([0.1, 0.5, 0.2, 0.9])
    assert cal.tau_drop_for_loss(probe, 0.0) == pytest.approx(0.1)


def test_f1_and_mae_per_class():
    assert cal.f1(np.array([1, 1, 0], bool), np.array([1, 0, 0], bool)) == pytest.approx(2 / 3)
    mae = cal.mae_per_class(np.array([[0.25], [0.5]]), np.array([[0.25], [0.75]]), 4)
    assert mae == {"1": pytest.approx(0.0), "3": pytest.approx(1.0)}


def test_config_defaults_scale_probe_and_judge_layers():
    cfg = ScorerConfig()
    assert cfg.resolved_layers(24) == (18, 24)  # gpt-oss-20b, design notes
    assert cfg.resolved_layers(6) == (5, 6)  # MiniLM, proportional
    assert (cfg.calibration.keep_rate("web"), cfg.calibration.keep_rate("code")) == (0.3, 0.5)
    with pytest.raises(ValueError, match="scorer.probe_layer"):
        ScorerConfig(probe_layer=10).resolved_layers(6)


def test_config_rejects_pool_min_above_max_naming_both_fields():
    with pytest.raises(Exception, match="actors_min.*actors_max"):
        load_config(None, ["scorer.scoring.actors_min=3", "scorer.scoring.actors_max=2"])
