"""The fits behind LR transfer: parabola optimum in log-LR and the token-horizon regression."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.trainer.hparam.fit import fit_power_law, parabola_optimum


def test_parabola_finds_known_optimum_between_grid_points():
    true_lr = 2.7e-3
    lrs = [1e-3 * 2**k for k in range(-3, 5)]
    losses = [3.0 + 0.4 * (math.log(lr) - math.log(true_lr)) ** 2 for lr in lrs]
    opt = parabola_optimum(lrs, losses)
    assert opt.bracketed
    assert opt.lr == pytest.approx(true_lr, rel=1e-6)
    assert opt.loss == pytest.approx(3.0, abs=1e-9)
    assert opt.best_grid_lr == 2e-3


def test_parabola_with_noise_and_a_diverged_point_stays_close():
    rng = np.random.default_rng(0)
    true_lr = 5e-3
    lrs = list(np.geomspace(1e-4, 1e-1, 10))
    losses = [2.0 + 0.3 * (math.log(lr / true_lr)) ** 2 + rng.normal(0, 0.005) for lr in lrs]
    losses[-1] = math.inf  # the largest LR diverged
    for neighbours in (1, 2, 3):  # 3 points through the best one, or least squares over 5 and 7
        opt = parabola_optimum(lrs, losses, neighbours=neighbours)
        assert opt.bracketed and opt.points_used == 2 * neighbours + 1
        assert abs(math.log(opt.lr / true_lr)) < 0.15


def test_parabola_at_grid_edge_is_not_bracketed():
    lrs = [1e-3, 2e-3, 4e-3, 8e-3]
    losses = [4.0, 3.5, 3.2, 3.0]  # still falling at the largest LR
    opt = parabola_optimum(lrs, losses)
    assert not opt.bracketed
    assert opt.lr == 8e-3


def test_parabola_needs_three_finite_points():
    with pytest.raises(ValueError, match="at least 3"):
        parabola_optimum([1e-3, 2e-3, 4e-3], [3.0, math.nan, math.inf])


def test_regression_recovers_a_and_b_from_noisy_synthetic_optima():
    rng = np.random.default_rng(1)
    a, b = 1.2, -0.35
    tokens = np.geomspace(1e6, 1e9, 12)
    lrs = np.exp(a + b * np.log(tokens) + rng.normal(0, 0.05, tokens.size))
    fit = fit_power_law(tokens, lrs)
    assert fit.b == pytest.approx(b, abs=3 * fit.b_se + 1e-9)
    assert fit.a == pytest.approx(a, abs=3 * fit.a_se + 1e-9)
    assert abs(fit.b - b) < 0.03
    assert fit.r2 > 0.95
    lr, lo, hi = fit.predict(1e13)
    assert lo < math.exp(a + b * math.log(1e13)) < hi
    assert lo < lr < hi


def test_prediction_interval_widens_away_from_the_data():
    rng = np.random.default_rng(2)
    tokens = np.geomspace(1e6, 1e8, 6)
    lrs = np.exp(-0.5 * np.log(tokens) + rng.normal(0, 0.1, tokens.size))
    fit = fit_power_law(tokens, lrs)
    _, lo_near, hi_near = fit.predict(1e7)
    _, lo_far, hi_far = fit.predict(1e12)
    assert math.log(hi_far / lo_far) > math.log(hi_near / lo_near)


def test_regression_rejects_a_single_budget():
    with pytest.raises(ValueError, match="2 distinct token budgets"):
        fit_power_law([1e6, 1e6], [1e-3, 2e-3])


def test_bootstrap_over_seeds_gives_the_optimum_of_the_mean_and_its_spread():
    import numpy as np

    from services.trainer.hparam.fit import bootstrap_optimum

    lrs = [0.01 * 2**k for k in range(7)]
    rng = np.random.default_rng(0)
    true = 0.08
    table = [[3.0 + 0.2 * math.log(lr / true) ** 2 + rng.normal(0, 0.01) for _ in range(4)] for lr in lrs]
    opt = bootstrap_optimum(lrs, table)
    assert opt.seeds == 4 and opt.bracketed
    assert abs(math.log(opt.lr / true)) < 0.3
    assert 0 < opt.ln_lr_se < 0.5
    noisy = [[v + rng.normal(0, 0.05) for v in row] for row in table]
    assert bootstrap_optimum(lrs, noisy).ln_lr_se > opt.ln_lr_se  # noisier seeds, less certain optimum
    assert bootstrap_optimum(lrs, [row[:1] for row in table]).ln_lr_se is None  # one seed: no spread


def test_bootstrap_fits_every_resample_even_with_a_diverged_seed():
    from services.trainer.hparam.fit import bootstrap_optimum

    lrs = [0.01 * 2**k for k in range(6)]
    table = [[3.0 + 0.2 * math.log(lr / 0.04) ** 2 + 0.01 * j for j in range(3)] for lr in lrs]
    for row in table[3:]:
        row[0] = float("nan")  # seed 0 diverged at the three largest LRs
    opt = bootstrap_optimum(lrs, table, rounds=50)
    assert opt.bootstrap_rounds == 50 and opt.ln_lr_se is not None


def test_bootstrap_raises_on_a_resample_it_cannot_fit_instead_of_dropping_it(monkeypatch):
    from services.trainer.hparam import fit

    lrs = [0.01 * 2**k for k in range(5)]
    table = [[3.0 + 0.2 * math.log(lr / 0.04) ** 2 + 0.01 * j for j in range(3)] for lr in lrs]
    real, calls = fit.parabola_optimum, []

    def fails_on_the_third_resample(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # the centre fit, then resamples 1, 2, 3
            raise ValueError("planted failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(fit, "parabola_optimum", fails_on_the_third_resample)
    with pytest.raises(ValueError, match="bootstrap resample 3 of 20 could not be fitted"):
        fit.bootstrap_optimum(lrs, table, rounds=20)


def test_weighted_law_trusts_precise_optima_more():
    tokens = [1e4, 2e4, 4e4, 8e4]
    lrs = [math.exp(-0.5 * math.log(t)) for t in tokens]
    lrs[3] *= 3.0  # an outlier...
    plain = fit_power_law(tokens, lrs)
    weighted = fit_power_law(tokens, lrs, [0.05, 0.05, 0.05, 2.0])  # ...known to be imprecise
    assert abs(weighted.b + 0.5) < abs(plain.b + 0.5)
    assert weighted.weighted and not plain.weighted
    lr, lo, hi = weighted.predict(1e5)
    assert lo < lr < hi
