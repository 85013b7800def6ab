"""Ingest: one batch in one transaction, scalar points appended as packed chunks, compaction.

Why chunks and Core statements: a training run logs millions of points (one per key per step);
a row per point makes ingest and a 1M-point query slow on any SQL store, and the ORM's
per-object bookkeeping cost more than the data itself at small batch sizes. Each batch adds one
chunk row per key in ~7 round trips whatever its size, and a series' partial chunks are merged
every COMPACT_AFTER batches (db.py), so ingest never rewrites a growing blob.

Why the statements are built once (`IngestStatements`): building a SQLAlchemy expression (the
series update's CASE clauses, the WHERE clauses) cost more CPU per batch than executing it; the
same objects with bound parameters hit SQLAlchemy's compiled cache and skip the building.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
from sqlalchemy import bindparam, case, delete, func, insert, select, update

from services.tracker.chunks import chunk_row, concat, unpack
from services.tracker.db import (
    CHUNK_POINTS,
    COMPACT_AFTER,
    Artifact,
    EventRow,
    Histogram,
    IngestedBatch,
    MetricChunk,
    Run,
    Series,
)
from services.tracker.store.base import NotFound, StoreBase
from shared.tracking.schema import Batch


def _listed(refused: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"refused": refused} if refused else {}


class IngestStatements:
    """The hot path's statements, built once per store; every value arrives as a bound parameter."""

    def __init__(self, store: StoreBase):
        series, runs = Series.__table__, Run.__table__
        self.run_exists = select(runs.c.id).where(runs.c.id == bindparam("run_id"))
        # RETURNING, not rowcount: psycopg 3 reports -1 for ON CONFLICT inserts
        batches = IngestedBatch.__table__
        self.mark_batch = store.insert_ignore(batches).returning(batches.c.batch_id)
        self.add_series = store.insert_ignore(series)
        self.series_ids = select(series.c.id, series.c.key, series.c.n_small).where(
            series.c.run_id == bindparam("run_id"), series.c.key.in_(bindparam("keys", expanding=True)))
        if not store.sqlite:  # appends to one series are serialised on PostgreSQL
            self.series_ids = self.series_ids.with_for_update()
        self.add_chunks = insert(MetricChunk.__table__)
        reaches = func.coalesce(series.c.last_step, -1) <= bindparam("ls")
        self.grow_series = update(series).where(series.c.id == bindparam("sid")).values(
            n_points=series.c.n_points + bindparam("dn"),
            n_nan=series.c.n_nan + bindparam("dnan"),
            n_posinf=series.c.n_posinf + bindparam("dpinf"),
            n_neginf=series.c.n_neginf + bindparam("dninf"),
            first_nonfinite_step=func.coalesce(series.c.first_nonfinite_step, bindparam("fbad")),
            version=series.c.version + 1,
            n_small=bindparam("small"),
            # the highest step wins, not the last batch to arrive (a replayed spool comes late)
            last_step=case((reaches, bindparam("ls")), else_=series.c.last_step),
            last_value=case((reaches, bindparam("lv")), else_=series.c.last_value),
        )
        self.touch_run = update(runs).where(runs.c.id == bindparam("run_id")).values(
            updated=bindparam("now"), last_seen=bindparam("now"))


class IngestStore(StoreBase):
    @functools.cached_property
    def _ingest_sql(self) -> IngestStatements:
        return IngestStatements(self)

    def ingest(self, run_id: str, batch: Batch, refused: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Store one batch; a batch id already stored is acknowledged and skipped.

        `refused` lists the items validation took out of the batch (the rest is stored); it is
        returned to the client with the answer, which keeps those items for a later `sync`."""
        now = time.time()
        sql = self._ingest_sql
        with self.writing_core() as conn:
            if conn.execute(sql.run_exists, {"run_id": run_id}).first() is None:
                raise NotFound(f"run {run_id!r} does not exist; create it first with POST /api/runs")
            fresh = conn.execute(sql.mark_batch, {"run_id": run_id, "batch_id": batch.batch_id}).first()
            if fresh is None:
                return {"stored": False, "duplicate": True, "points": 0, **_listed(refused)}
            n_points = self._append_metrics(conn, run_id, {k: v for k, v in batch.metrics.items() if v.steps})
            if batch.histograms:
                conn.execute(insert(Histogram), [{"run_id": run_id, **h.model_dump()} for h in batch.histograms])
            if batch.events:
                conn.execute(insert(EventRow), [{"run_id": run_id, **e.model_dump()} for e in batch.events])
            if batch.artifacts:
                conn.execute(insert(Artifact),
                             [{"run_id": run_id, "created": now, **a.model_dump()} for a in batch.artifacts])
            conn.execute(sql.touch_run, {"run_id": run_id, "now": now})
        return {"stored": True, "duplicate": False, "points": n_points, **_listed(refused)}

    def _append_metrics(self, conn, run_id: str, metrics: dict) -> int:
        if not metrics:
            return 0
        keys = sorted(metrics)
        sql = self._ingest_sql
        conn.execute(
            sql.add_series,
            [{"run_id": run_id, "key": k, "n_points": 0, "n_nan": 0, "n_posinf": 0, "n_neginf": 0, "version": 0, "n_small": 0}
             for k in keys],
        )
        found = conn.execute(sql.series_ids, {"run_id": run_id, "keys": keys})
        rows = {key: (sid, n_small) for sid, key, n_small in found}
        chunks, updates, to_compact, total = [], [], [], 0
        for key in keys:
            pts = metrics[key]
            sid, n_small = rows[key]
            steps = np.asarray(pts.steps, dtype=np.int64)
            walls = np.asarray(pts.walls, dtype=np.float64)
            values = np.asarray(pts.values, dtype=np.float64)  # "NaN"/"Infinity"/"-Infinity" parse to IEEE
            for i in range(0, len(steps), CHUNK_POINTS):
                j = min(i + CHUNK_POINTS, len(steps))
                chunks.append(chunk_row(sid, steps[i:j], walls[i:j], values[i:j]))
            n_small += 1 if len(steps) % CHUNK_POINTS else 0
            if n_small >= COMPACT_AFTER:
                to_compact.append(sid)
            bad = ~np.isfinite(values)
            top = int(len(steps) - 1 - np.argmax(steps[::-1]))  # the last point at the batch's highest step
            updates.append({
                "sid": sid,
                "dn": len(steps),
                "dnan": int(np.isnan(values).sum()),
                "dpinf": int(np.isposinf(values).sum()),
                "dninf": int(np.isneginf(values).sum()),
                "fbad": int(steps[bad].min()) if bad.any() else None,
                "small": n_small,
                "ls": int(steps[top]),
                "lv": float(values[top]) if np.isfinite(values[top]) else None,
            })
            total += len(steps)
        conn.execute(sql.add_chunks, chunks)
        conn.execute(sql.grow_series, updates)
        for sid in to_compact:
            self._compact(conn, sid)
        return total

    def _compact(self, conn, sid: int) -> None:
        """Merge a series' trailing partial chunks into full ones, so a query reads ~N/CHUNK_POINTS rows.

        Appending a new row per batch keeps ingest cheap (no rewrite of a growing blob); merging
        every COMPACT_AFTER partial chunks bounds the row count, and each point is rewritten only
        a few times over its life. Only chunks after the last full one are merged: merging across
        a full chunk would break the id order that keeps points in arrival order.
        """
        last_full = conn.scalar(
            select(func.max(MetricChunk.id)).where(MetricChunk.series_id == sid, MetricChunk.n >= CHUNK_POINTS)
        )
        small = conn.execute(
            select(MetricChunk.id, MetricChunk.n, MetricChunk.data)
            .where(MetricChunk.series_id == sid, MetricChunk.id > (last_full or 0))
            .order_by(MetricChunk.id)
        ).all()
        if len(small) >= 2:
            steps, walls, values = concat([unpack(data, n) for _, n, data in small])
            conn.execute(delete(MetricChunk).where(MetricChunk.id.in_([cid for cid, _, _ in small])))
            conn.execute(insert(MetricChunk), [
                chunk_row(sid, steps[i : i + CHUNK_POINTS], walls[i : i + CHUNK_POINTS], values[i : i + CHUNK_POINTS])
                for i in range(0, len(steps), CHUNK_POINTS)
            ])
            remaining = 1 if len(steps) % CHUNK_POINTS else 0
        else:
            remaining = len(small)
        conn.execute(update(Series).where(Series.id == sid).values(n_small=remaining))
