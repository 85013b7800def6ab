"""Server-side downsampling of a scalar series to a requested number of points (min/max buckets).

Why min/max buckets rather than striding or averaging: a loss spike or a NaN-adjacent blow-up is
exactly what a researcher must see, and striding or averaging hides it. The series (in step order)
is cut into buckets of equal size; each bucket contributes the point with its smallest and the
point with its largest finite value, in step order, so the drawn envelope is exact at every pixel
column (the M4 idea, Jugel et al., VLDB 2014, without first/last points).

Non-finite points are never a bucket's min or max, and none of them disappears either: a bucket
holding any NaN/±Inf also contributes its first non-finite point, which the API returns as a gap
(value None, listed in `gaps` with its kind) so the chart breaks the line there and marks it. When
the series has non-finite points the buckets are 3 points wide instead of 2, so the answer still
has at most `max_points` points.

Why blocks: the store keeps, for every run of `BLOCK` consecutive points, that block's min point,
max point and first non-finite point (a rollup written once at ingest). A bucket made of whole
blocks has as its min the smallest block min, as its max the largest block max and as its gap the
first block gap, so a 1M-point series is downsampled exactly from ~47k rollup points instead of 1M
raw ones. Raw points are the case of blocks of one point.
"""

from __future__ import annotations

import numpy as np

BLOCK = 64
NO_GAP = -1  # the step a block without non-finite points stores as its gap point

Cols = tuple[np.ndarray, np.ndarray, np.ndarray]  # steps, walls, values


def bucket_bounds(n: int, max_points: int, per_bucket: int = 2) -> np.ndarray:
    """Start index (in blocks, or points) of every bucket plus `n` at the end."""
    n_buckets = max(1, max_points // per_bucket)
    width = -(-n // n_buckets)
    return np.minimum(np.arange(0, n_buckets + 1) * width, n)


def _grid(values: np.ndarray, width: int, n_rows: int, fill: float) -> np.ndarray:
    pad = n_rows * width - len(values)
    if pad:
        values = np.concatenate([values, np.full(pad, fill)])
    return values.reshape(n_rows, width)


def _arg_extreme(values: np.ndarray, width: int, n_rows: int, lowest: bool) -> np.ndarray:
    """Index of each row's smallest (or largest) finite value; non-finite entries never win."""
    fill = np.inf if lowest else -np.inf
    grid = _grid(np.where(np.isfinite(values), values, fill), width, n_rows, fill)
    idx = grid.argmin(axis=1) if lowest else grid.argmax(axis=1)
    return np.arange(n_rows) * width + idx


def _first_true(flags: np.ndarray, width: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(index of each row's first True, whether the row has one)."""
    grid = _grid(flags, width, n_rows, False)
    return np.arange(n_rows) * width + grid.argmax(axis=1), grid.any(axis=1)


def block_extremes(steps: np.ndarray, walls: np.ndarray, values: np.ndarray,
                   block: int = BLOCK) -> tuple[Cols, Cols, Cols]:
    """(min points, max points, first non-finite points) of each run of `block` points: a chunk's rollup.

    A block with no non-finite point stores step NO_GAP as its gap point."""
    n = len(values)
    n_blocks = -(-n // block)
    i_lo = np.minimum(_arg_extreme(values, block, n_blocks, True), n - 1)
    i_hi = np.minimum(_arg_extreme(values, block, n_blocks, False), n - 1)
    i_gap, has_gap = _first_true(~np.isfinite(values), block, n_blocks)
    i_gap = np.minimum(i_gap, n - 1)
    gap = (np.where(has_gap, steps[i_gap], NO_GAP), np.where(has_gap, walls[i_gap], 0.0),
           np.where(has_gap, values[i_gap], 0.0))
    return (steps[i_lo], walls[i_lo], values[i_lo]), (steps[i_hi], walls[i_hi], values[i_hi]), gap


def minmax_blocks(lo: Cols, hi: Cols, gap: Cols | None, max_points: int) -> Cols:
    """Downsample blocks given by their min, max and gap points to <= max_points points."""
    nb = len(lo[2])
    gaps = gap is not None and bool((gap[0] != NO_GAP).any())
    bounds = bucket_bounds(nb, max_points, 3 if gaps else 2)
    width = int(bounds[1] - bounds[0])
    n_rows = len(bounds) - 1
    valid = np.arange(n_rows) * width < nb
    picks = [(lo, np.minimum(_arg_extreme(lo[2], width, n_rows, True)[valid], nb - 1)),
             (hi, np.minimum(_arg_extreme(hi[2], width, n_rows, False)[valid], nb - 1))]
    if gaps:
        i_gap, has = _first_true(gap[0] != NO_GAP, width, n_rows)
        picks.append((gap, np.minimum(i_gap[valid & has], nb - 1)))
    steps = np.concatenate([cols[0][i] for cols, i in picks])
    walls = np.concatenate([cols[1][i] for cols, i in picks])
    values = np.concatenate([cols[2][i] for cols, i in picks])
    order = np.lexsort((walls, steps))
    steps, walls, values = steps[order], walls[order], values[order]
    # a bucket whose min and max are the same point (one point, a flat line, all NaN) keeps it once
    same_val = (values[1:] == values[:-1]) | (np.isnan(values[1:]) & np.isnan(values[:-1]))
    dup = np.concatenate([[False], (steps[1:] == steps[:-1]) & (walls[1:] == walls[:-1]) & same_val])
    return steps[~dup], walls[~dup], values[~dup]


def minmax_downsample(steps: np.ndarray, walls: np.ndarray, values: np.ndarray, max_points: int) -> Cols:
    """Return (steps, walls, values) with at most `max_points` points keeping each bucket's min/max/gap."""
    if len(values) <= max_points:
        return steps, walls, values
    cols = (steps, walls, values)
    bad = ~np.isfinite(values)
    gap = (np.where(bad, steps, NO_GAP), walls, values) if bad.any() else None
    return minmax_blocks(cols, cols, gap, max_points)


def to_json_values(values: np.ndarray) -> list[float | None]:
    """JSON has no NaN/Inf: non-finite values become None (a gap in the chart)."""
    out = values.astype(object)
    out[~np.isfinite(values)] = None
    return out.tolist()


def gap_kinds(values: np.ndarray) -> list[list]:
    """[index, "nan" | "inf" | "-inf"] for every non-finite value: what each gap stands for."""
    idx = np.flatnonzero(~np.isfinite(values))
    return [[int(i), "nan" if np.isnan(values[i]) else ("inf" if values[i] > 0 else "-inf")] for i in idx]
