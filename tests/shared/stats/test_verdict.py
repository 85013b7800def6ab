"""Verdict sentences and the seeds-needed estimate."""

from __future__ import annotations

from shared.stats import compare_paired, seeds_needed, verdict_line


def test_seeds_needed_for_an_effect_of_one_sd_is_ten():
    # the normal approximation says ((1.95996 + 0.84162) / 1)^2 = 7.85 -> 8; with t quantiles at
    # n - 1 degrees of freedom: n = 9 needs (2.306 + 0.889)^2 = 10.2 > 9, n = 10 needs (2.262 + 0.883)^2 = 9.89
    assert seeds_needed(1.0, 1.0) == 10
    assert seeds_needed(-0.5, 1.0) == 34  # (2.035 + 0.853)^2 x 4 = 33.4
    assert seeds_needed(0.0, 1.0) is None
    assert seeds_needed(5.0, 0.0) == 2


def test_seeds_needed_past_the_search_falls_back_to_the_normal_formula():
    assert seeds_needed(0.01, 1.0) == 78489  # (2.8016 / 0.01)^2


def test_lower_is_better_metric_names_the_arm_with_the_lower_value_as_winner():
    comp = compare_paired({0: 1.0, 1: 1.1, 2: 1.2}, {0: 1.5, 1: 1.5, 2: 1.5})  # arm lower by 0.5, 0.4, 0.3
    line = verdict_line("eval/bpb", "curated", "raw", comp, higher_is_better=False)
    # sd 0.1, half-width t(0.975, 2) * 0.1 / sqrt(3) = 0.2484
    assert line.startswith("curated beat raw by 0.4 eval/bpb, 95% t-interval [0.1516, 0.6484]"), line
    assert line.endswith("(3 seeds)")


def test_higher_is_better_metric_where_the_baseline_wins():
    comp = compare_paired({0: 0.2, 1: 0.3, 2: 0.25}, {0: 0.5, 1: 0.5, 2: 0.5})
    line = verdict_line("task/acc", "curated", "raw", comp, higher_is_better=True)
    # sd 0.05, half-width 4.3027 * 0.05 / sqrt(3) = 0.1242
    assert line.startswith("raw beat curated by 0.25 task/acc, 95% t-interval [0.1258, 0.3742]"), line


def test_an_interval_over_zero_says_how_many_seeds_would_be_needed():
    comp = compare_paired({0: 1.1, 1: 0.8, 2: 1.05}, {0: 1.0, 1: 1.0, 2: 1.0})  # +0.1, -0.2, +0.05
    line = verdict_line("eval/loss", "curated", "raw", comp, higher_is_better=False)
    assert "no difference detectable at this budget" in line
    expected = seeds_needed(comp.mean, comp.sd)
    assert f"about {expected} seeds would be needed" in line


def test_identical_arms_say_so_instead_of_a_seed_count():
    comp = compare_paired({0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0})
    assert "the arms measured the same on every seed" in verdict_line("m", "a", "b", comp, True)


def test_a_mean_difference_that_is_zero_to_rounding_needs_no_seed_count():
    """Accuracies differing by +1/42 and -1/42 average to ~1e-18, not 0: that is no effect to detect."""
    a, b = 1 / 42, 2 / 42
    comp = compare_paired({0: 0.5 + a, 1: 0.5 - a, 2: 0.5 + b, 3: 0.5 - b}, {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5})
    assert comp.mean != 0 and abs(comp.mean) < 1e-15
    assert seeds_needed(comp.mean, comp.sd) is None
    line = verdict_line("task/acc", "a", "b", comp, True)
    assert "the mean difference is zero, so no number of seeds would put one arm ahead" in line
    assert "the arms measured the same on every seed" not in line  # they did not: the seeds differ


def test_seeds_that_all_agree_but_spread_widely_are_no_win():
    """Three same-signed differences: a percentile bootstrap would call this a win (its interval is
    [min, max]); the t-interval over 2 degrees of freedom covers zero."""
    comp = compare_paired({0: 1.1, 1: 1.2, 2: 2.0}, {0: 1.0, 1: 1.0, 2: 1.0})
    line = verdict_line("task/acc", "a", "b", comp, True)
    assert "no difference detectable at this budget" in line and "t-interval [-0.7921, 1.659]" in line, line


def test_the_same_difference_on_every_seed_names_no_winner():
    """Two seeds each one item (1/32) apart: sd 0, no t-interval can be formed; a point is not a win."""
    comp = compare_paired({0: 0.5 + 1 / 32, 1: 0.25 + 1 / 32}, {0: 0.5, 1: 0.25})
    line = verdict_line("task/acc", "a", "b", comp, True)
    assert "beat" not in line and line.startswith("a vs b on task/acc: no interval") and "+0.03125 for a" in line, line
    spread = compare_paired({0: 1.1, 1: 1.2, 2: 1.15}, dict.fromkeys(range(3), 1.0))
    assert verdict_line("task/acc", "a", "b", spread, True).startswith("a beat b by")
