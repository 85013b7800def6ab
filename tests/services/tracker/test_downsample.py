"""Min/max-bucket downsampling: every bucket's extremes survive, the size bound holds, and every bucket
holding NaN/Inf keeps its first one, drawn as a gap."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.tracker.downsample import bucket_bounds, gap_kinds, minmax_downsample, to_json_values


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), max_points=st.integers(2, 600), seed=st.integers(0, 2**31 - 1))
def test_each_bucket_keeps_its_min_and_max(n, max_points, seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n).cumsum()
    steps = np.arange(n) * 3
    walls = steps * 0.5
    d_steps, d_walls, d_values = minmax_downsample(steps, walls, values, max_points)
    assert len(d_values) <= max(max_points, 2) or n <= max_points
    if n <= max_points:
        assert np.array_equal(d_values, values)
        return
    assert np.all(np.diff(d_steps) > 0)  # step order, no duplicates
    kept = set(d_steps.tolist())
    bounds = bucket_bounds(n, max_points)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if lo >= hi:
            continue
        bucket = values[lo:hi]
        assert steps[lo + int(bucket.argmin())] in kept
        assert steps[lo + int(bucket.argmax())] in kept
    assert np.array_equal(d_walls, d_steps * 0.5)


def test_nonfinite_points_are_never_extremes_and_every_bucket_keeps_its_first_one_as_a_gap():
    values = np.array([1.0, np.nan, 5.0, -2.0, np.inf, 0.0, np.nan, np.nan, -np.inf, 3.0, 4.0, 2.0])
    steps = np.arange(12)
    d_steps, _, d_values = minmax_downsample(steps, steps * 1.0, values, 9)  # 3 buckets of 4 (3 points each)
    # buckets [1, nan, 5, -2] [inf, 0, nan, nan] [-inf, 3, 4, 2]: min, max and the first non-finite
    assert d_steps.tolist() == [1, 2, 3, 4, 5, 8, 10, 11]
    assert to_json_values(d_values) == [None, 5.0, -2.0, None, 0.0, None, 4.0, 2.0]
    assert gap_kinds(d_values) == [[0, "nan"], [3, "inf"], [5, "-inf"]]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), max_points=st.integers(3, 600), n_bad=st.integers(1, 5), seed=st.integers(0, 2**31 - 1))
def test_an_isolated_nonfinite_point_survives_downsampling_as_a_gap(n, max_points, n_bad, seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n).cumsum()
    bad = rng.integers(0, n, n_bad)
    values[bad] = rng.choice([np.nan, np.inf, -np.inf], n_bad)
    steps = np.arange(n)
    d_steps, _, d_values = minmax_downsample(steps, steps * 1.0, values, max_points)
    assert len(d_values) <= max_points
    bounds = bucket_bounds(n, max_points, 3) if n > max_points else np.array([0, n])
    gaps = set(d_steps[~np.isfinite(d_values)].tolist())
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        in_bucket = [b for b in sorted(set(bad.tolist())) if lo <= b < hi]
        if in_bucket:
            assert in_bucket[0] in gaps  # the bucket's first non-finite point is drawn as a gap


def test_a_million_points_come_back_as_at_most_two_thousand_with_global_extremes():
    values = np.random.default_rng(0).standard_normal(1_000_000)
    steps = np.arange(1_000_000)
    d_steps, _, d = minmax_downsample(steps, steps * 1.0, values, 2000)
    assert len(d) <= 2000
    assert d.min() == values.min() and d.max() == values.max()
    assert d_steps[0] < 1000 and d_steps[-1] >= 999_000  # the whole range is covered


@settings(max_examples=40, deadline=None)
@given(n=st.integers(200, 20_000), max_points=st.integers(2, 300), block=st.sampled_from([1, 7, 64]),
       seed=st.integers(0, 2**31 - 1))
def test_downsampling_from_block_rollups_keeps_each_bucket_of_blocks_min_max_and_first_gap(n, max_points, block, seed):
    from services.tracker.downsample import block_extremes, minmax_blocks

    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n).cumsum()
    values[rng.integers(0, n, 3)] = np.nan
    steps = np.arange(n)
    lo, hi, gap = block_extremes(steps, steps * 1.0, values, block)
    d_steps, _, d_values = minmax_blocks(lo, hi, gap, max_points)
    assert len(d_values) <= max(3, max_points)
    kept = set(d_steps.tolist())
    n_blocks = len(lo[0])
    bounds = bucket_bounds(n_blocks, max_points, 3)
    for b0, b1 in zip(bounds[:-1], bounds[1:], strict=True):
        if b0 >= b1:
            continue
        seg = values[b0 * block : min(n, b1 * block)]
        if np.isfinite(seg).any():
            assert b0 * block + int(np.nanargmin(seg)) in kept
            assert b0 * block + int(np.nanargmax(seg)) in kept
        if not np.isfinite(seg).all():
            assert b0 * block + int(np.flatnonzero(~np.isfinite(seg))[0]) in kept
