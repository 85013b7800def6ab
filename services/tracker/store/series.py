"""Scalar series reads: the key list, and a series downsampled server-side, whole or a step range.

A point logged twice at one step is read once, the later value winning. A whole-series query over
a big series (n >= points × BLOCK) reads only the chunks' rollups (which keep both);
anything else reads raw points, and a step-range query (the dashboard's zoom) reads only the
chunks whose step span overlaps the range, so a 1,000-step window of a 1M-point series comes
back at full resolution from one or two chunks. Chunks are read in id (arrival) order and sorted
by step only when a replayed spool made them arrive out of order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.tracker.chunks import concat, unpack, unpack_rollup
from services.tracker.db import Histogram, MetricChunk, Run, Series
from services.tracker.downsample import (
    BLOCK,
    NO_GAP,
    gap_kinds,
    minmax_blocks,
    minmax_downsample,
    to_json_values,
)
from services.tracker.store.base import NotFound, StoreBase

Cols = tuple[np.ndarray, np.ndarray, np.ndarray]


def _in_step_order(cols: Cols) -> Cols:
    """Points by step, and one point per step: the last to arrive (a value logged again at a step
    replaces the earlier one, as a rerun step or a corrected figure should)."""
    steps = cols[0]
    if len(steps) > 1 and not bool(np.all(steps[1:] >= steps[:-1])):
        order = np.argsort(steps, kind="stable")  # replayed spools may arrive after newer points
        cols = tuple(c[order] for c in cols)  # type: ignore[assignment]
        steps = cols[0]
    if len(steps) > 1:
        last = np.ones(len(steps), dtype=bool)
        last[:-1] = steps[1:] != steps[:-1]  # stable order: the last of equal steps arrived last
        if not last.all():
            return tuple(c[last] for c in cols)  # type: ignore[return-value]
    return cols


class SeriesStore(StoreBase):
    def keys(self, run_id: str) -> dict[str, Any]:
        with self.reading() as s:
            if s.get(Run, run_id) is None:
                raise NotFound(f"run {run_id!r} does not exist")
            series = s.scalars(select(Series).where(Series.run_id == run_id).order_by(Series.key)).all()
            hist = s.execute(
                select(Histogram.key, func.count(), func.max(Histogram.step))
                .where(Histogram.run_id == run_id)
                .group_by(Histogram.key)
                .order_by(Histogram.key)
            ).all()
            return {
                "scalars": [
                    {
                        "key": x.key,
                        "points": x.n_points,
                        "nonfinite": x.n_nan + x.n_posinf + x.n_neginf,
                        "last_step": x.last_step,
                        "last_value": x.last_value,
                    }
                    for x in series
                ],
                "histograms": [{"key": k, "steps": n, "last_step": last} for k, n, last in hist],
            }

    def _load_raw(self, s: Session, sid: int, start: int | None = None, end: int | None = None) -> Cols:
        stmt = select(MetricChunk.n, MetricChunk.data).where(MetricChunk.series_id == sid)
        if start is not None:
            stmt = stmt.where(MetricChunk.max_step >= start)
        if end is not None:
            stmt = stmt.where(MetricChunk.min_step <= end)
        rows = s.execute(stmt.order_by(MetricChunk.id)).all()
        if not rows:
            return np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.float64)
        cols = _in_step_order(concat([unpack(data, n) for n, data in rows]))
        if start is None and end is None:
            return cols
        lo = 0 if start is None else int(np.searchsorted(cols[0], start, "left"))
        hi = len(cols[0]) if end is None else int(np.searchsorted(cols[0], end, "right"))
        return tuple(c[lo:hi] for c in cols)  # type: ignore[return-value]

    def _load_rollup(self, s: Session, sid: int):
        """(min, max, gap) block points of the whole series, gap None when no block has one; None
        when chunks overlap in steps (a late replay: blocks are not contiguous) or when a rollup
        written before gaps were kept cannot place this series' non-finite points."""
        rows = s.execute(
            select(MetricChunk.nb, MetricChunk.rollup, MetricChunk.min_step, MetricChunk.max_step)
            .where(MetricChunk.series_id == sid)
            .order_by(MetricChunk.id)
        ).all()
        if any(rows[i][3] > rows[i + 1][2] for i in range(len(rows) - 1)):
            return None
        parts = [unpack_rollup(r, nb) for nb, r, _, _ in rows]
        lo, hi = concat([p[0] for p in parts]), concat([p[1] for p in parts])
        if any(p[2] is None for p in parts):
            return (lo, hi, None, False)
        if not any(len(p[2][0]) for p in parts):
            return (lo, hi, None, True)
        gap = (np.full(len(lo[0]), NO_GAP, np.int64), np.zeros(len(lo[0])), np.zeros(len(lo[0])))
        at = 0
        for (nb, _, _, _), (_, _, (idx, *cols)) in zip(rows, parts, strict=True):
            for dense, sparse in zip(gap, cols, strict=True):
                dense[at + idx] = sparse
            at += nb
        return (lo, hi, gap, True)

    def series(self, run_id: str, key: str, points: int = 2000, start: int | None = None,
               end: int | None = None) -> dict[str, Any]:
        """A series downsampled to <= points, optionally only steps in [start, end]: from the block
        rollups when the whole series is big enough that every bucket spans whole blocks, else from
        the raw points."""
        ranged = start is not None or end is not None
        with self.reading() as s:
            series = s.scalar(select(Series).where(Series.run_id == run_id, Series.key == key))
            if series is None:
                raise NotFound(f"run {run_id!r} has no scalar series {key!r}")
            nonfinite = series.n_nan + series.n_posinf + series.n_neginf
            rolled = None
            if not ranged and series.n_points >= points * BLOCK:
                rolled = self.cached((series.id, series.version, "rollup"), lambda: self._load_rollup(s, series.id))
                if rolled is not None and not rolled[3] and nonfinite:
                    rolled = None  # an old rollup cannot place this series' gaps: use the raw points
            if rolled is not None:
                d_steps, d_walls, d_values = minmax_blocks(*rolled[:3], points)
            elif ranged:
                d_steps, d_walls, d_values = minmax_downsample(*self._load_raw(s, series.id, start, end), points)
            else:
                raw = self.cached((series.id, series.version, "raw"), lambda: self._load_raw(s, series.id))
                d_steps, d_walls, d_values = minmax_downsample(*raw, points)
            info = (series.n_points, series.n_nan, series.n_posinf, series.n_neginf, series.first_nonfinite_step)
        out = {
            "run": run_id,
            "key": key,
            "total": info[0],
            "returned": int(len(d_values)),
            "steps": d_steps.tolist(),
            "walls": d_walls.tolist(),
            "values": to_json_values(d_values),
            "gaps": gap_kinds(d_values),
            "nonfinite": {"nan": info[1], "inf": info[2], "-inf": info[3], "first_step": info[4]},
        }
        if ranged:
            out["range"] = [start, end]
        return out
