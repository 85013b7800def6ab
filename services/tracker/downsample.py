"""Server-side downsampling of a scalar series to a requested number of points (min/max buckets).

Why min/max buckets rather than striding or averaging: a loss spike or a NaN-adjacent blow-up is
exactly what a researcher must see, and striding or averaging hides it. The series (in step order)
is cut into `max_points // 2` buckets of equal size; each bucket contributes the point with its
smallest and the point with its largest finite value, in step order, so the drawn envelope is
exact at every pixel column (the M4 idea, Jugel et al., VLDB 2014, without first/last points).
Non-finite points are never a bucket's min or max; a bucket of only NaN/Inf yields one point whose
value is None so the chart shows a gap.

Why blocks: the store keeps, for every run of `BLOCK` consecutive points, that block's min and max
point (a rollup written once at ingest). A bucket made of whole blocks has as its min the smallest
block min and as its max the largest block max, so a 1M-point series is downsampled exactly from
~31k rollup points instead of 1M raw ones. Raw points are the case of blocks of one point.
"""

from __future__ import annotations

import numpy as np

BLOCK = 64

Cols = tuple[np.ndarray, np.ndarray, np.ndarray]  # steps, walls, values


def bucket_bounds(n: int, max_points: int) -> np.ndarray:
    """Start index (in blocks, or points) of every bucket plus `n` at the end."""
    n_buckets = max(1, max_points // 2)
    width = -(-n // n_buckets)
    return np.minimum(np.arange(0, n_buckets + 1) * width, n)


def _arg_extreme(values: np.ndarray, width: int, n_rows: int, lowest: bool) -> np.ndarray:
    """Index of each row's smallest (or largest) finite value; non-finite entries never win."""
    fill = np.inf if lowest else -np.inf
    v = np.where(np.isfinite(values), values, fill)
    pad = n_rows * width - len(v)
    if pad:
        v = np.concatenate([v, np.full(pad, fill)])
    grid = v.reshape(n_rows, width)
    idx = grid.argmin(axis=1) if lowest else grid.argmax(axis=1)
    return np.arange(n_rows) * width + idx


def block_extremes(steps: np.ndarray, walls: np.ndarray, values: np.ndarray, block: int = BLOCK) -> tuple[Cols, Cols]:
    """(min points, max points) of each run of `block` points: the rollup stored with a chunk."""
    n = len(values)
    n_blocks = -(-n // block)
    i_lo = np.minimum(_arg_extreme(values, block, n_blocks, True), n - 1)
    i_hi = np.minimum(_arg_extreme(values, block, n_blocks, False), n - 1)
    return (steps[i_lo], walls[i_lo], values[i_lo]), (steps[i_hi], walls[i_hi], values[i_hi])


def minmax_blocks(lo: Cols, hi: Cols, max_points: int) -> Cols:
    """Downsample blocks given by their min points `lo` and max points `hi` to <= max_points points."""
    nb = len(lo[2])
    bounds = bucket_bounds(nb, max_points)
    width = int(bounds[1] - bounds[0])
    n_rows = len(bounds) - 1
    valid = np.arange(n_rows) * width < nb
    i_lo = np.minimum(_arg_extreme(lo[2], width, n_rows, True)[valid], nb - 1)
    i_hi = np.minimum(_arg_extreme(hi[2], width, n_rows, False)[valid], nb - 1)
    steps = np.concatenate([lo[0][i_lo], hi[0][i_hi]])
    walls = np.concatenate([lo[1][i_lo], hi[1][i_hi]])
    values = np.concatenate([lo[2][i_lo], hi[2][i_hi]])
    order = np.lexsort((walls, steps))
    steps, walls, values = steps[order], walls[order], values[order]
    # a bucket whose min and max are the same point (one point, a flat line, all NaN) keeps it once
    same_val = (values[1:] == values[:-1]) | (np.isnan(values[1:]) & np.isnan(values[:-1]))
    dup = np.concatenate([[False], (steps[1:] == steps[:-1]) & (walls[1:] == walls[:-1]) & same_val])
    return steps[~dup], walls[~dup], values[~dup]


def minmax_downsample(steps: np.ndarray, walls: np.ndarray, values: np.ndarray, max_points: int) -> Cols:
    """Return (steps, walls, values) with at most `max_points` points keeping each bucket's min/max."""
    if len(values) <= max_points:
        return steps, walls, values
    cols = (steps, walls, values)
    return minmax_blocks(cols, cols, max_points)


def to_json_values(values: np.ndarray) -> list[float | None]:
    """JSON has no NaN/Inf: non-finite values become None (a gap in the chart)."""
    out = values.astype(object)
    out[~np.isfinite(values)] = None
    return out.tolist()
