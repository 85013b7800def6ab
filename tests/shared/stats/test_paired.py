"""Paired differences and the bootstrap interval, against answers worked out by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.stats import bootstrap_mean_interval, compare_paired, mean_sd


def test_exact_bootstrap_of_three_zeros_and_a_one_is_0_to_0_75():
    # resample mean = k/4 with k ~ Binomial(4, 1/4): P(k=0) = 0.316 > 2.5%, P(k <= 2) = 0.949 < 97.5% <= P(k <= 3)
    assert bootstrap_mean_interval([0.0, 0.0, 0.0, 1.0]) == (0.0, 0.75)


def test_exact_bootstrap_matches_enumerating_every_resample():
    values = np.array([0.3, -0.1, 0.7, 0.2, 0.05])
    means = sorted(float(values[list(idx)].mean()) for idx in itertools.product(range(5), repeat=5))
    lo_idx = int(np.ceil(0.025 * len(means))) - 1
    hi_idx = int(np.ceil(0.975 * len(means))) - 1
    assert bootstrap_mean_interval(values) == pytest.approx((means[lo_idx], means[hi_idx]), abs=1e-12)


def test_constant_differences_give_a_point_interval():
    assert bootstrap_mean_interval([0.5] * 3) == (0.5, 0.5)


def test_monte_carlo_bootstrap_is_seeded_and_near_the_normal_interval():
    values = np.random.default_rng(1).normal(2.0, 1.0, size=40)
    first, again = bootstrap_mean_interval(values), bootstrap_mean_interval(values)
    assert first == again
    se = values.std(ddof=1) / np.sqrt(len(values))
    assert first[0] == pytest.approx(values.mean() - 1.96 * se, abs=0.1)
    assert first[1] == pytest.approx(values.mean() + 1.96 * se, abs=0.1)


def test_bootstrap_refuses_nan_and_empty_input():
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="no values"):
        bootstrap_mean_interval([])


def test_compare_pairs_by_seed_and_ignores_seeds_only_one_arm_has():
    comp = compare_paired({0: 3.0, 1: 5.0, 2: 4.0, 7: 100.0}, {0: 1.0, 1: 2.0, 2: 2.0})
    assert comp.seeds == (0, 1, 2)
    assert comp.differences == (2.0, 3.0, 2.0)
    assert comp.mean == pytest.approx(7 / 3)
    assert comp.sd == pytest.approx(np.std([2, 3, 2], ddof=1))
    assert (comp.low, comp.high) == (2.0, 3.0)  # P(all three resampled = 2) = 8/27 > 2.5%; P(all 3) = 1/27
    assert comp.excludes_zero


def test_compare_without_a_common_seed_names_both_seed_lists():
    with pytest.raises(ValueError, match=r"arm seeds \[1\], baseline seeds \[0\]"):
        compare_paired({1: 1.0}, {0: 1.0})


def test_mean_sd_of_one_value_has_zero_sd():
    assert mean_sd([4.0]) == (4.0, 0.0)
    assert mean_sd([1.0, 3.0]) == (2.0, pytest.approx(np.sqrt(2.0)))
