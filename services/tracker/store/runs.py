"""Runs: create or resume, finish, heartbeats and crash detection, listing, lineage, deletion.

Why crash detection lives in the store: a process killed with SIGKILL (or a node lost) never
sends its finish, so the run would say "running" forever. Clients send a heartbeat every few
seconds; a running run not heard from (no init, batch or heartbeat) for `crash_after_s` is marked
`crashed`, with its end at the last sign of life. A heartbeat from a run marked crashed (a long
network partition, not a death) sets it running again.
"""

from __future__ import annotations

import secrets
import time
from types import SimpleNamespace
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.tracker.db import (
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
from services.tracker.store.base import Conflict, NotFound, StoreBase, run_to_dict

SWEEP_EVERY_S = 2.0
MAX_FIGURES = 12


class RunStore(StoreBase):
    _last_sweep = 0.0

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

    def create_or_resume(self, body) -> tuple[dict[str, Any], bool]:
        """Create the run, or resume it when `body.id` exists (status back to running)."""
        now = time.time()
        run_id = body.id or secrets.token_hex(8)
        with self.writing() as s:
            run = s.get(Run, run_id)
            resumed = run is not None
            if resumed and body.fork_of is not None and (run.fork_of, run.fork_step) != (body.fork_of, body.fork_step):
                raise Conflict(f"run {run_id!r} exists; a fork is a new run: give it a new id (or none)")
            source = self._fork_source(s, body) if run is None else None
            if run is None:
                given = body.model_fields_set
                run = Run(
                    id=run_id,
                    project_id=source.project_id if source and "project" not in given else self._project_id(s, body.project),
                    name=body.name or run_id,
                    config=source.config if source and "config" not in given else body.config,
                    tags=sorted(set(source.tags if source and "tags" not in given else body.tags)),
                    status="running",
                    git_commit=body.git_commit,
                    host=body.host,
                    parent=source.parent if source and not body.parent else body.parent,
                    created=body.created or now,
                    updated=now,
                    last_seen=now,
                    fork_of=body.fork_of,
                    fork_step=body.fork_step,
                )
                s.add(run)
                s.flush()
                for tag in run.tags:
                    s.add(RunTag(run_id=run_id, tag=tag))
                if source is not None:
                    self._copy_history(s, source.id, run_id, body.fork_step)
            project = s.scalar(select(Project.name).where(Project.id == run.project_id))
            if resumed:
                self._resume(s, run, project, body)
                run.status, run.finished, run.updated, run.last_seen = "running", None, now, now
            return run_to_dict(run, project), resumed

    def _fork_source(self, s: Session, body) -> Run | None:
        if body.fork_of is None:
            return None
        source = s.get(Run, body.fork_of)
        if source is None:
            raise NotFound(f"run {body.fork_of!r} does not exist, so it cannot be forked")
        return source

    def _copy_history(self, s: Session, source_id: str, run_id: str, last_step: int) -> None:
        """A fork starts with its source's scalars and histograms up to `last_step`, as W&B's
        `fork_from` does: its charts read as one run that took another path from that step on."""
        conn = s.connection()
        metrics = {}
        for sid, key in s.execute(select(Series.id, Series.key).where(Series.run_id == source_id)):
            steps, walls, values = self._load_raw(s, sid, None, last_step)
            if len(steps):
                metrics[key] = SimpleNamespace(steps=steps, walls=walls, values=values)
        self._append_metrics(conn, run_id, metrics)
        rows = s.execute(select(Histogram.key, Histogram.step, Histogram.wall, Histogram.values, Histogram.edges)
                         .where(Histogram.run_id == source_id, Histogram.step <= last_step)).all()
        if rows:
            conn.execute(insert(Histogram), [{"run_id": run_id, "key": k, "step": st, "wall": w, "values": v, "edges": e}
                                             for k, st, w, v, e in rows])

    def _resume(self, s: Session, run: Run, project: str, body) -> None:
        """Store what a resume changes (name, config, tags, parent): only the fields the client sent,
        so a resume that gives none keeps the run as it was. A run never moves project."""
        given = body.model_fields_set
        if "project" in given and body.project != project:
            raise Conflict(f"run {run.id!r} belongs to project {project!r}; it cannot be resumed under "
                           f"{body.project!r} (start a new run, or resume without a project)")
        if "name" in given and body.name:
            run.name = body.name
        if "config" in given and body.config:
            run.config = body.config
        if "parent" in given and body.parent:
            run.parent = body.parent
        if "tags" in given:
            run.tags = sorted(set(body.tags))
            s.execute(delete(RunTag).where(RunTag.run_id == run.id))
            s.add_all(RunTag(run_id=run.id, tag=t) for t in run.tags)

    def finish(self, run_id: str, body) -> dict[str, Any]:
        with self.writing() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise NotFound(f"run {run_id!r} does not exist")
            run.status, run.finished, run.updated = body.status, body.wall or time.time(), time.time()
            project = s.scalar(select(Project.name).where(Project.id == run.project_id))
            return run_to_dict(run, project)

    def heartbeat(self, run_id: str) -> dict[str, Any]:
        now = time.time()
        with self.writing() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise NotFound(f"run {run_id!r} does not exist")
            run.last_seen = now
            if run.status == "crashed":
                run.status, run.finished = "running", None
            return {"id": run_id, "status": run.status}

    def sweep_crashed(self, force: bool = False) -> int:
        """Mark running runs silent for crash_after_s as crashed (at most every SWEEP_EVERY_S)."""
        now = time.time()
        if not force and now - self._last_sweep < SWEEP_EVERY_S:
            return 0
        self._last_sweep = now
        seen = func.coalesce(Run.last_seen, Run.updated)
        silent = (Run.status == "running") & (seen < now - self.crash_after_s)
        with self.reading() as s:
            if not s.scalar(select(func.count()).select_from(Run).where(silent)):
                return 0  # the common case costs one read and no write lock
        with self.writing() as s:
            # `updated` moves so the runs table's next poll (changed_after) picks the new status up
            return s.execute(update(Run).where(silent).values(status="crashed", finished=seen, updated=now)).rowcount or 0

    def get_run(self, run_id: str) -> dict[str, Any]:
        self.sweep_crashed()
        with self.reading() as s:
            row = s.execute(
                select(Run, Project.name).join(Project, Project.id == Run.project_id).where(Run.id == run_id)
            ).first()
            if row is None:
                raise NotFound(f"run {run_id!r} does not exist")
            return run_to_dict(row[0], row[1])

    def children(self, run_id: str) -> list[dict[str, Any]]:
        """The run's child runs in start order, each with its figures (scalars logged once) and its
        own children (e.g. a pipeline stage's report runs): what a pipeline page lists."""
        self.get_run(run_id)
        with self.reading() as s:
            rows = s.execute(
                select(Run, Project.name).join(Project, Project.id == Run.project_id)
                .where(Run.parent == run_id).order_by(Run.created, Run.id)
            ).all()
            kids = [run_to_dict(r, p) for r, p in rows]
            ids = [k["id"] for k in kids]
            found: dict[str, list] = {i: [] for i in ids}
            for rid, key, value in s.execute(
                select(Series.run_id, Series.key, Series.last_value)
                .where(Series.run_id.in_(ids), Series.n_points == 1).order_by(Series.key)
            ):
                found[rid].append((key.count("/"), key, value))
            # top-level figures (`records`, `kept`) before nested detail (`rubrics/general/n_test`);
            # `seconds` always (a skipped stage shows how long it took when it ran)
            figures = {i: {k: v for _, k, v in sorted(found[i])[:MAX_FIGURES] + [x for x in found[i] if x[1] == "seconds"]}
                       for i in ids}
            grand: dict[str, list] = {i: [] for i in ids}
            for gid, name, parent, status in s.execute(
                select(Run.id, Run.name, Run.parent, Run.status).where(Run.parent.in_(ids)).order_by(Run.created)
            ):
                grand[parent].append({"id": gid, "name": name, "status": status})
        return [{**k, "figures": figures[k["id"]], "children": grand[k["id"]]} for k in kids]

    def projects(self) -> list[dict[str, Any]]:
        with self.reading() as s:
            rows = s.execute(
                select(Project.name, func.count(Run.id))
                .join(Run, Run.project_id == Project.id, isouter=True)
                .group_by(Project.name)
                .order_by(Project.name)
            ).all()
            return [{"name": n, "runs": c} for n, c in rows]

    def delete_run(self, run_id: str) -> None:
        with self.writing() as s:
            if s.get(Run, run_id) is None:
                raise NotFound(f"run {run_id!r} does not exist")
            sids = select(Series.id).where(Series.run_id == run_id)
            s.execute(delete(MetricChunk).where(MetricChunk.series_id.in_(sids)))
            for table in (Series, Histogram, EventRow, Artifact, IngestedBatch, RunTag):
                s.execute(delete(table).where(table.run_id == run_id))
            s.execute(delete(Run).where(Run.id == run_id))
