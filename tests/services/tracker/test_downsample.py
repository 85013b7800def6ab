"""Min/max-bucket downsampling: every bucket's extremes survive, the size bound holds, NaN/Inf are gaps."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.tracker.downsample import bucket_bounds, minmax_downsample, to_json_values


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


def test_nonfinite_points_are_never_extremes_and_all_nan_buckets_become_gaps():
    values = np.array([1.0, np.nan, 5.0, -2.0, np.inf, 0.0, np.nan, np.nan, -np.inf, 3.0])
    steps = np.arange(10)
    d_steps, _, d_values = minmax_downsample(steps, steps * 1.0, values, 8)  # 4 buckets of 3
    # buckets [1, nan, 5] [-2, inf, 0] [nan, nan, -inf] [3]: +inf/-inf are never a bucket's max/min,
    # and the all-non-finite bucket keeps one point, drawn as a gap
    assert d_steps.tolist() == [0, 2, 3, 5, 6, 9]
    assert to_json_values(d_values) == [1.0, 5.0, -2.0, 0.0, None, 3.0]


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
def test_downsampling_from_block_rollups_keeps_each_bucket_of_blocks_min_and_max(n, max_points, block, seed):
    from services.tracker.downsample import block_extremes, minmax_blocks

    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n).cumsum()
    values[rng.integers(0, n, 3)] = np.nan
    steps = np.arange(n)
    lo, hi = block_extremes(steps, steps * 1.0, values, block)
    d_steps, _, d_values = minmax_blocks(lo, hi, max_points)
    assert len(d_values) <= max(2, max_points - max_points % 2)
    kept = set(d_steps.tolist())
    n_blocks = len(lo[0])
    bounds = bucket_bounds(n_blocks, max_points)
    for b0, b1 in zip(bounds[:-1], bounds[1:], strict=True):
        if b0 >= b1:
            continue
        seg = values[b0 * block : min(n, b1 * block)]
        if np.isfinite(seg).any():
            assert b0 * block + int(np.nanargmin(seg)) in kept
            assert b0 * block + int(np.nanargmax(seg)) in kept
