"""Verdict sentences and the seeds-needed estimate."""

from __future__ import annotations

from shared.stats import compare_paired, seeds_needed, verdict_line


def test_seeds_needed_for_an_effect_of_one_sd_is_eight():
    # ((1.95996 + 0.84162) * 1 / 1)^2 = 7.85 -> 8
    assert seeds_needed(1.0, 1.0) == 8
    assert seeds_needed(-0.5, 1.0) == 32  # 4 x 7.85 = 31.4
    assert seeds_needed(0.0, 1.0) is None
    assert seeds_needed(5.0, 0.0) == 2


def test_lower_is_better_metric_names_the_arm_with_the_lower_value_as_winner():
    comp = compare_paired({0: 1.0, 1: 1.1, 2: 1.2}, {0: 1.5, 1: 1.5, 2: 1.5})  # arm lower by 0.5, 0.4, 0.3
    line = verdict_line("eval/bpb", "curated", "raw", comp, higher_is_better=False)
    assert line.startswith("curated beat raw by 0.4 eval/bpb, 95% interval [0.3, 0.5]"), line
    assert "(3 seeds)" in line


def test_higher_is_better_metric_where_the_baseline_wins():
    comp = compare_paired({0: 0.2, 1: 0.3}, {0: 0.5, 1: 0.5})
    line = verdict_line("task/acc", "curated", "raw", comp, higher_is_better=True)
    assert line.startswith("raw beat curated by 0.25 task/acc, 95% interval [0.2, 0.3]"), line


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


def test_a_win_on_few_seeds_says_how_often_that_happens_by_chance():
    """Two seeds: the interval is [min, max] of the differences, so it excludes zero for half of all
    pairs of equal arms; the verdict has to say so."""
    two = compare_paired({0: 1.1, 1: 1.3}, {0: 1.0, 1: 1.0})
    line = verdict_line("task/acc", "a", "b", two, True)
    assert line.startswith("a beat b by 0.2 task/acc") and line.endswith(
        "; with 2 seeds every seed agrees by chance 50% of the time when the arms are equal")
    five = compare_paired({s: 1.1 + 0.01 * s for s in range(5)}, dict.fromkeys(range(5), 1.0))
    assert "by chance 6% of the time" in verdict_line("task/acc", "a", "b", five, True)
    six = compare_paired({s: 1.1 + 0.01 * s for s in range(6)}, dict.fromkeys(range(6), 1.0))
    assert "by chance" not in verdict_line("task/acc", "a", "b", six, True)  # 3% < 5%
