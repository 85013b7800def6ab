"""Reads other than scalar series: histograms (heatmap rows), events, artifacts and config diffs."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import func, select

from services.tracker.db import Artifact, EventRow, Histogram, Run
from services.tracker.store.base import NotFound, StoreBase, flatten


class QueryStore(StoreBase):
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

    def _require_run(self, s, run_id: str) -> None:
        if s.get(Run, run_id) is None:
            raise NotFound(f"run {run_id!r} does not exist")

    def events(self, run_id: str, kind: str | None = None, limit: int = 1000, offset: int = 0,
               kinds_out: list[str] | None = None) -> dict[str, Any]:
        """One page of the run's events in time order, with `total` (all that match), so a client
        that receives fewer than `total` knows the list is cut and can ask for the next page.
        `kinds_out` leaves kinds out (the run page reads funnels and calibrations on their own)."""
        cond = [EventRow.run_id == run_id]
        if kind:
            cond.append(EventRow.kind == kind)
        if kinds_out:
            cond.append(EventRow.kind.not_in(kinds_out))
        with self.reading() as s:
            self._require_run(s, run_id)
            total = s.scalar(select(func.count()).select_from(EventRow).where(*cond))
            rows = s.scalars(select(EventRow).where(*cond).order_by(EventRow.wall, EventRow.id)
                             .limit(limit).offset(offset)).all()
            return {"total": total, "offset": offset, "events": [
                {"kind": e.kind, "message": e.message, "data": e.data, "step": e.step, "wall": e.wall} for e in rows]}

    def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        with self.reading() as s:
            self._require_run(s, run_id)
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
