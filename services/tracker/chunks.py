"""The packed form of a scalar series' points: one `metric_chunks` row per up to 8,192 points.

A chunk's `data` is three little-endian arrays back to back (step int64, wall float64, value
float64); NaN/Inf stay IEEE values. Its `rollup` holds, for every 64 points (downsample.BLOCK),
the block's min point and max point in the same packed form, so a query over a big series reads
the rollups instead of every point, followed by the blocks' first non-finite points, sparse (a
count, then block index and packed point of each block that has one): most blocks have none, and
a dense third part would make every whole-series query read 50% more bytes. Rollups written
before gap points existed end after min and max; a query treats them as having no gap data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.tracker.downsample import NO_GAP, block_extremes

POINT_BYTES = 24


def pack(steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> bytes:
    return steps.astype("<i8").tobytes() + walls.astype("<f8").tobytes() + values.astype("<f8").tobytes()


def unpack(data: bytes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.frombuffer(data, dtype=np.uint8)
    return arr[: 8 * n].view("<i8"), arr[8 * n : 16 * n].view("<f8"), arr[16 * n : 24 * n].view("<f8")


def chunk_row(sid: int, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """One metric_chunks row: the packed points plus their per-block rollup."""
    lo, hi, gap = block_extremes(steps, walls, values)
    return {
        "series_id": sid,
        "n": len(steps),
        "min_step": int(steps.min()),
        "max_step": int(steps.max()),
        "data": pack(steps, walls, values),
        "nb": len(lo[0]),
        "rollup": pack(*lo) + pack(*hi) + pack_gaps(gap),
    }


def pack_gaps(gap: tuple[np.ndarray, np.ndarray, np.ndarray]) -> bytes:
    idx = np.flatnonzero(gap[0] != NO_GAP)
    return np.int64(len(idx)).astype("<i8").tobytes() + idx.astype("<i8").tobytes() + pack(*(c[idx] for c in gap))


def unpack_rollup(rollup: bytes, nb: int) -> tuple[tuple, tuple, tuple | None]:
    """(min points, max points, gaps) of one chunk; gaps is (block index, steps, walls, values) of
    the blocks holding a non-finite point, or None for a rollup written before gaps were kept."""
    part = POINT_BYTES * nb
    lo, hi = unpack(rollup[:part], nb), unpack(rollup[part : 2 * part], nb)
    rest = rollup[2 * part :]
    if len(rest) < 8:
        return lo, hi, None
    count = int(np.frombuffer(rest[:8], "<i8")[0])
    if count < 0 or len(rest) != 8 + (8 + POINT_BYTES) * count:
        return lo, hi, None  # not a gap list this code wrote: treat the gaps as unknown
    idx = np.frombuffer(rest[8 : 8 + 8 * count], "<i8")
    return lo, hi, (idx, *unpack(rest[8 + 8 * count :], count))


def concat(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]
