"""Every read and write the API does, on SQLite or PostgreSQL through one SQLAlchemy engine.

Why a process-wide write lock on SQLite: SQLite allows one writer at a time, and letting 8
threads race for its file lock means busy-waits and timeouts; one Python lock makes them queue
fairly. PostgreSQL takes concurrent writers and row locks (`FOR UPDATE`) serialise appends to the
same series. Series reads are cached per (series id, version) so a dashboard polling a 1M-point
series pays the unpacking once per new batch, not once per poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np
from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.tracker import db
from services.tracker.db import (
    CHUNK_POINTS,
    COMPACT_AFTER,
    ApiToken,
    Artifact,
    EventRow,
    Histogram,
    IngestedBatch,
    MetricChunk,
    Project,
    Run,
    RunTag,
    Series,
)
from services.tracker.downsample import (
    BLOCK,
    block_extremes,
    minmax_blocks,
    minmax_downsample,
    to_json_values,
)
from services.tracker.schemas import Batch, RunCreate, RunFinish


class NotFound(LookupError):
    pass


def pack(steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> bytes:
    return (
        steps.astype("<i8").tobytes() + walls.astype("<f8").tobytes() + values.astype("<f8").tobytes()
    )


def unpack(data: bytes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.frombuffer(data, dtype=np.uint8)
    return (
        arr[: 8 * n].view("<i8"),
        arr[8 * n : 16 * n].view("<f8"),
        arr[16 * n : 24 * n].view("<f8"),
    )


def chunk_row(sid: int, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """One metric_chunks row: the packed points plus their per-block min/max rollup."""
    lo, hi = block_extremes(steps, walls, values)
    return {
        "series_id": sid,
        "n": len(steps),
        "min_step": int(steps.min()),
        "max_step": int(steps.max()),
        "data": pack(steps, walls, values),
        "nb": len(lo[0]),
        "rollup": pack(*lo) + pack(*hi),
    }


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def run_to_dict(run: Run, project: str) -> dict[str, Any]:
    return {
        "id": run.id,
        "project": project,
        "name": run.name,
        "config": run.config,
        "tags": run.tags,
        "status": run.status,
        "git_commit": run.git_commit,
        "host": run.host,
        "parent": run.parent,
        "created": run.created,
        "finished": run.finished,
        "updated": run.updated,
    }


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys (`model.moe.top_k`), the form config overrides use."""
    if isinstance(config, dict) and config:
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: config} if prefix else {}


class Store:
    def __init__(self, url: str, cache_series: int = 64):
        self.url = url
        self.engine = db.make_engine(url)
        self.sqlite = db.is_sqlite(url)
        self._write_lock = threading.Lock() if self.sqlite else None
        self._cache: OrderedDict[tuple[int, int], tuple] = OrderedDict()
        self._cache_size = cache_series
        self._cache_lock = threading.Lock()
        self._token_ok: dict[str, float] = {}

    @contextlib.contextmanager
    def writing(self):
        lock = self._write_lock or contextlib.nullcontext()
        with lock, Session(self.engine) as s, s.begin():
            yield s

    def reading(self) -> Session:
        return Session(self.engine)

    # ---------------------------------------------------------------- tokens
    def create_token(self, name: str = "default") -> str:
        token = "mlt_" + secrets.token_urlsafe(32)
        with self.writing() as s:
            s.add(ApiToken(name=name, token_hash=hash_token(token), created=time.time()))
        return token

    def token_valid(self, token: str) -> bool:
        """True for a known, unrevoked token; a positive answer is reused for 60 s (one query per
        minute per client instead of one per batch; a token revoked in the store stops within 60 s)."""
        digest = hash_token(token)
        now = time.monotonic()
        if self._token_ok.get(digest, 0.0) > now:
            return True
        with self.reading() as s:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            ok = row is not None and not row.revoked
        if ok:
            self._token_ok[digest] = now + 60.0
        return ok

    def count_tokens(self) -> int:
        with self.reading() as s:
            return s.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.revoked.is_(False))) or 0

    # ---------------------------------------------------------------- runs
    def _project_id(self, s: Session, name: str) -> int:
        pid = s.scalar(select(Project.id).where(Project.name == name))
        if pid is None:
            try:
                with s.begin_nested():
                    p = Project(name=name, created=time.time())
                    s.add(p)
                    s.flush()
                    pid = p.id
            except IntegrityError:  # another writer created it first (PostgreSQL)
                pid = s.scalar(select(Project.id).where(Project.name == name))
        return pid

    def create_or_resume(self, body: RunCreate) -> tuple[dict[str, Any], bool]:
        """Create the run, or resume it when `body.id` exists (status back to running)."""
        now = time.time()
        run_id = body.id or secrets.token_hex(8)
        with self.writing() as s:
            run = s.get(Run, run_id)
            resumed = run is not None
            if run is None:
                pid = self._project_id(s, body.project)
                run = Run(
                    id=run_id,
                    project_id=pid,
                    name=body.name or run_id,
                    config=body.config,
                    tags=sorted(set(body.tags)),
                    status="running",
                    git_commit=body.git_commit,
                    host=body.host,
                    parent=body.parent,
                    created=body.created or now,
                    updated=now,
                )
                s.add(run)
                s.flush()
                for tag in run.tags:
                    s.add(RunTag(run_id=run_id, tag=tag))
            else:
                run.status, run.finished, run.updated = "running", None, now
            project = s.scalar(select(Project.name).where(Project.id == run.project_id))
            return run_to_dict(run, project), resumed

    def finish(self, run_id: str, body: RunFinish) -> dict[str, Any]:
        with self.writing() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise NotFound(f"run {run_id!r} does not exist")
            run.status, run.finished, run.updated = body.status, body.wall or time.time(), time.time()
            project = s.scalar(select(Project.name).where(Project.id == run.project_id))
            return run_to_dict(run, project)

    def get_run(self, run_id: str) -> dict[str, Any]:
        with self.reading() as s:
            row = s.execute(
                select(Run, Project.name).join(Project, Project.id == Run.project_id).where(Run.id == run_id)
            ).first()
            if row is None:
                raise NotFound(f"run {run_id!r} does not exist")
            return run_to_dict(row[0], row[1])

    def list_runs(
        self,
        project: str | None = None,
        status: str | None = None,
        tags: list[str] | None = None,
        q: str | None = None,
        parent: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        stmt = select(Run, Project.name).join(Project, Project.id == Run.project_id)
        if project:
            stmt = stmt.where(Project.name == project)
        if status:
            stmt = stmt.where(Run.status == status)
        if parent:
            stmt = stmt.where(or_(Run.parent == parent, Run.id == parent))
        for tag in tags or []:
            stmt = stmt.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
        if q:
            pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            stmt = stmt.where(or_(Run.name.ilike(pattern, escape="\\"), Run.id.ilike(pattern, escape="\\")))
        with self.reading() as s:
            total = s.scalar(select(func.count()).select_from(stmt.subquery()))
            rows = s.execute(stmt.order_by(Run.created.desc()).limit(limit).offset(offset)).all()
            return {"total": total, "runs": [run_to_dict(r, p) for r, p in rows]}

    def projects(self) -> list[dict[str, Any]]:
        with self.reading() as s:
            rows = s.execute(
                select(Project.name, func.count(Run.id))
                .join(Run, Run.project_id == Project.id, isouter=True)
                .group_by(Project.name)
                .order_by(Project.name)
            ).all()
            return [{"name": n, "runs": c} for n, c in rows]

    # ---------------------------------------------------------------- ingest
    def _insert_ignore(self, table):
        """INSERT … ON CONFLICT DO NOTHING for this backend (no failed statement, no savepoint)."""
        if self.sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        return insert(table).on_conflict_do_nothing()

    def ingest(self, run_id: str, batch: Batch) -> dict[str, Any]:
        """Store one batch in one transaction; a batch id already stored is acknowledged and skipped.

        Core statements, batched: ~7 round trips per batch whatever its size (the ORM's per-object
        bookkeeping cost more than the data itself at small batch sizes).
        """
        now = time.time()
        lock = self._write_lock or contextlib.nullcontext()
        with lock, self.engine.begin() as conn:
            if conn.execute(select(Run.id).where(Run.id == run_id)).first() is None:
                raise NotFound(f"run {run_id!r} does not exist; create it first with POST /api/runs")
            fresh = conn.execute(
                self._insert_ignore(IngestedBatch.__table__).returning(IngestedBatch.__table__.c.batch_id),
                {"run_id": run_id, "batch_id": batch.batch_id},
            ).first()  # RETURNING, not rowcount: psycopg 3 reports -1 for ON CONFLICT inserts
            if fresh is None:
                return {"stored": False, "duplicate": True, "points": 0}
            n_points = self._append_metrics(conn, run_id, {k: v for k, v in batch.metrics.items() if v.steps})
            if batch.histograms:
                conn.execute(insert(Histogram), [{"run_id": run_id, **h.model_dump()} for h in batch.histograms])
            if batch.events:
                conn.execute(insert(EventRow), [{"run_id": run_id, **e.model_dump()} for e in batch.events])
            if batch.artifacts:
                conn.execute(insert(Artifact), [{"run_id": run_id, "created": now, **a.model_dump()} for a in batch.artifacts])
            conn.execute(update(Run).where(Run.id == run_id).values(updated=now))
        return {"stored": True, "duplicate": False, "points": n_points}

    def _append_metrics(self, conn, run_id: str, metrics: dict) -> int:
        if not metrics:
            return 0
        keys = sorted(metrics)
        conn.execute(
            self._insert_ignore(Series.__table__),
            [{"run_id": run_id, "key": k, "n_points": 0, "n_nan": 0, "n_posinf": 0, "n_neginf": 0, "version": 0, "n_small": 0}
             for k in keys],
        )
        stmt = select(Series.id, Series.key, Series.n_small).where(Series.run_id == run_id, Series.key.in_(keys))
        if not self.sqlite:
            stmt = stmt.with_for_update()  # appends to one series are serialised on PostgreSQL
        rows = {key: (sid, n_small) for sid, key, n_small in conn.execute(stmt)}
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
            updates.append({
                "sid": sid,
                "dn": len(steps),
                "dnan": int(np.isnan(values).sum()),
                "dpinf": int(np.isposinf(values).sum()),
                "dninf": int(np.isneginf(values).sum()),
                "fbad": int(steps[bad].min()) if bad.any() else None,
                "small": n_small,
                "ls": int(steps[-1]),
                "lv": float(values[-1]) if np.isfinite(values[-1]) else None,
            })
            total += len(steps)
        conn.execute(insert(MetricChunk), chunks)
        conn.execute(
            update(Series.__table__)
            .where(Series.__table__.c.id == bindparam("sid"))
            .values(
                n_points=Series.__table__.c.n_points + bindparam("dn"),
                n_nan=Series.__table__.c.n_nan + bindparam("dnan"),
                n_posinf=Series.__table__.c.n_posinf + bindparam("dpinf"),
                n_neginf=Series.__table__.c.n_neginf + bindparam("dninf"),
                first_nonfinite_step=func.coalesce(Series.__table__.c.first_nonfinite_step, bindparam("fbad")),
                version=Series.__table__.c.version + 1,
                n_small=bindparam("small"),
                last_step=bindparam("ls"),
                last_value=bindparam("lv"),
            ),
            updates,
        )
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
            parts = [unpack(data, n) for _, n, data in small]
            steps, walls, values = (np.concatenate([p[k] for p in parts]) for k in range(3))
            conn.execute(delete(MetricChunk).where(MetricChunk.id.in_([cid for cid, _, _ in small])))
            conn.execute(insert(MetricChunk), [
                chunk_row(sid, steps[i : i + CHUNK_POINTS], walls[i : i + CHUNK_POINTS], values[i : i + CHUNK_POINTS])
                for i in range(0, len(steps), CHUNK_POINTS)
            ])
            remaining = 1 if len(steps) % CHUNK_POINTS else 0
        else:
            remaining = len(small)
        conn.execute(update(Series).where(Series.id == sid).values(n_small=remaining))

    # ---------------------------------------------------------------- reads
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

    def _cached(self, ck, load):
        with self._cache_lock:
            if ck in self._cache:
                self._cache.move_to_end(ck)
                return self._cache[ck]
        out = load()
        with self._cache_lock:
            self._cache[ck] = out
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    def _load_raw(self, s: Session, sid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = s.execute(
            select(MetricChunk.n, MetricChunk.data).where(MetricChunk.series_id == sid).order_by(MetricChunk.id)
        ).all()
        total = sum(n for n, _ in rows)
        cols = [np.empty(total, np.int64), np.empty(total, np.float64), np.empty(total, np.float64)]
        at = 0
        for n, data in rows:
            for col, part in zip(cols, unpack(data, n), strict=True):
                col[at : at + n] = part
            at += n
        steps, walls, values = cols
        if total > 1 and not bool(np.all(steps[1:] >= steps[:-1])):
            order = np.argsort(steps, kind="stable")  # replayed spools may arrive after newer points
            steps, walls, values = steps[order], walls[order], values[order]
        return steps, walls, values

    def _load_rollup(self, s: Session, sid: int):
        """Block min/max points of the whole series, or None when chunks are not in step order."""
        rows = s.execute(
            select(MetricChunk.nb, MetricChunk.rollup, MetricChunk.min_step, MetricChunk.max_step)
            .where(MetricChunk.series_id == sid)
            .order_by(MetricChunk.id)
        ).all()
        if any(rows[i][3] > rows[i + 1][2] for i in range(len(rows) - 1)):
            return None  # overlapping chunks (a late replay): blocks are not contiguous, use raw points
        parts = [(unpack(r[: 24 * nb], nb), unpack(r[24 * nb :], nb)) for nb, r, _, _ in rows]
        lo = tuple(np.concatenate([p[0][k] for p in parts]) for k in range(3))
        hi = tuple(np.concatenate([p[1][k] for p in parts]) for k in range(3))
        return lo, hi

    def series(self, run_id: str, key: str, points: int = 2000) -> dict[str, Any]:
        """A series downsampled to <= points: from the block rollups when the series is big enough
        that every bucket spans whole blocks (n >= points * BLOCK), else from the raw points."""
        with self.reading() as s:
            series = s.scalar(select(Series).where(Series.run_id == run_id, Series.key == key))
            if series is None:
                raise NotFound(f"run {run_id!r} has no scalar series {key!r}")
            rolled = None
            if series.n_points >= points * BLOCK:
                rolled = self._cached((series.id, series.version, "rollup"), lambda: self._load_rollup(s, series.id))
            if rolled is not None:
                d_steps, d_walls, d_values = minmax_blocks(rolled[0], rolled[1], points)
            else:
                raw = self._cached((series.id, series.version, "raw"), lambda: self._load_raw(s, series.id))
                d_steps, d_walls, d_values = minmax_downsample(*raw, points)
            info = (series.n_points, series.n_nan, series.n_posinf, series.n_neginf, series.first_nonfinite_step)
        return {
            "run": run_id,
            "key": key,
            "total": info[0],
            "returned": int(len(d_values)),
            "steps": d_steps.tolist(),
            "walls": d_walls.tolist(),
            "values": to_json_values(d_values),
            "nonfinite": {"nan": info[1], "inf": info[2], "-inf": info[3], "first_step": info[4]},
        }

    def histograms(self, run_id: str, key: str, max_steps: int = 400) -> dict[str, Any]:
        """The vectors of one key over steps, at most `max_steps` evenly spaced rows (a heatmap)."""
        with self.reading() as s:
            ids = s.scalars(
                select(Histogram.id)
                .where(Histogram.run_id == run_id, Histogram.key == key)
                .order_by(Histogram.step, Histogram.id)
            ).all()
            if not ids:
                raise NotFound(f"run {run_id!r} has no histogram {key!r}")
            if len(ids) > max_steps:  # evenly spaced rows; only those are read (a long run has 100k+)
                ids = [ids[i] for i in np.unique(np.linspace(0, len(ids) - 1, max_steps).round().astype(int))]
            rows = []
            for lo in range(0, len(ids), 500):
                part = ids[lo : lo + 500]
                rows += s.execute(
                    select(Histogram.step, Histogram.wall, Histogram.values, Histogram.edges, Histogram.id)
                    .where(Histogram.id.in_(part))
                ).all()
            rows.sort(key=lambda r: (r[0], r[4]))
        return {
            "run": run_id,
            "key": key,
            "steps": [r[0] for r in rows],
            "walls": [r[1] for r in rows],
            "values": [r[2] for r in rows],
            "edges": rows[-1][3],
        }

    def events(self, run_id: str, kind: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        stmt = select(EventRow).where(EventRow.run_id == run_id)
        if kind:
            stmt = stmt.where(EventRow.kind == kind)
        with self.reading() as s:
            rows = s.scalars(stmt.order_by(EventRow.wall, EventRow.id).limit(limit)).all()
            return [
                {"kind": e.kind, "message": e.message, "data": e.data, "step": e.step, "wall": e.wall} for e in rows
            ]

    def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        with self.reading() as s:
            rows = s.scalars(select(Artifact).where(Artifact.run_id == run_id).order_by(Artifact.id)).all()
            return [
                {
                    "name": a.name,
                    "kind": a.kind,
                    "path": a.path,
                    "sha256": a.sha256,
                    "size": a.size,
                    "meta": a.meta,
                    "created": a.created,
                }
                for a in rows
            ]

    def config_diff(self, a: str, b: str) -> dict[str, Any]:
        """Dotted keys whose values differ (or exist in one config only) between runs a and b."""
        ca, cb = flatten(self.get_run(a)["config"]), flatten(self.get_run(b)["config"])
        diff = [
            {"key": k, "a": ca.get(k), "b": cb.get(k), "in_a": k in ca, "in_b": k in cb}
            for k in sorted(set(ca) | set(cb))
            if k not in ca or k not in cb or ca[k] != cb[k]
        ]
        return {"a": a, "b": b, "differences": diff, "same": len(set(ca) | set(cb)) - len(diff)}

    def delete_run(self, run_id: str) -> None:
        with self.writing() as s:
            if s.get(Run, run_id) is None:
                raise NotFound(f"run {run_id!r} does not exist")
            sids = select(Series.id).where(Series.run_id == run_id)
            s.execute(delete(MetricChunk).where(MetricChunk.series_id.in_(sids)))
            for table in (Series, Histogram, EventRow, Artifact, IngestedBatch, RunTag):
                s.execute(delete(table).where(table.run_id == run_id))
            s.execute(delete(Run).where(Run.id == run_id))
