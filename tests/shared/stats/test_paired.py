"""Paired differences and the Student-t interval, against answers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.stats import compare_paired, mean_sd, t_mean_interval


def test_t_interval_of_three_values_uses_two_degrees_of_freedom():
    # mean 2, sd 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3) = 2.484138
    low, high = t_mean_interval([1.0, 2.0, 3.0])
    assert (low, high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)


def test_t_interval_over_three_same_signed_differences_can_still_cover_zero():
    """The case a percentile bootstrap gets wrong: over 3 seeds it spans [min, max] = [0.1, 1.0],
    excluding zero whenever every seed agrees; the t-interval scales the spread by t(2) = 4.3."""
    low, high = t_mean_interval([0.1, 0.2, 1.0])
    assert low < 0 < high


def test_t_interval_at_90_percent_and_many_values_is_near_the_normal_one():
    values = np.random.default_rng(1).normal(2.0, 1.0, size=400)
    se = values.std(ddof=1) / math.sqrt(len(values))
    low, high = t_mean_interval(values, level=0.9)
    assert low == pytest.approx(values.mean() - 1.6449 * se, rel=1e-3)
    assert high == pytest.approx(values.mean() + 1.6449 * se, rel=1e-3)


def test_constant_differences_give_a_point_and_one_value_an_unbounded_interval():
    assert t_mean_interval([0.5] * 3) == (0.5, 0.5)
    assert t_mean_interval([0.5]) == (-math.inf, math.inf)


def test_interval_refuses_nan_empty_input_and_a_bad_level():
    with pytest.raises(ValueError, match="finite"):
        t_mean_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="no values"):
        t_mean_interval([])
    with pytest.raises(ValueError, match="level"):
        t_mean_interval([1.0, 2.0], level=1.0)


def test_compare_pairs_by_seed_and_ignores_seeds_only_one_arm_has():
    comp = compare_paired({0: 3.0, 1: 5.0, 2: 4.0, 7: 100.0}, {0: 1.0, 1: 2.0, 2: 2.0})
    assert comp.seeds == (0, 1, 2)
    assert comp.differences == (2.0, 3.0, 2.0)
    assert comp.mean == pytest.approx(7 / 3)
    assert comp.sd == pytest.approx(np.std([2, 3, 2], ddof=1))
    half = 4.302653 * comp.sd / math.sqrt(3)  # 1.434
    assert (comp.low, comp.high) == pytest.approx((7 / 3 - half, 7 / 3 + half), abs=1e-5)
    assert comp.excludes_zero
    assert comp.as_dict()["interval"] == "student-t"


def test_compare_without_a_common_seed_names_both_seed_lists():
    with pytest.raises(ValueError, match=r"arm seeds \[1\], baseline seeds \[0\]"):
        compare_paired({1: 1.0}, {0: 1.0})


def test_mean_sd_of_one_value_has_zero_sd():
    assert mean_sd([4.0]) == (4.0, 0.0)
    assert mean_sd([1.0, 3.0]) == (2.0, pytest.approx(np.sqrt(2.0)))
