"""The runs table: filters (project, status, tags, text, parent, config values), sorting by a column,
a metric's last value or a config value, pages of any size, chosen metric and config columns, and
polls that return only the runs changed since the last answer.

Why configs stay on the server: a demo-sized config is ~16 KB, so a table of 500 runs that sent
every config on every poll moved ~8 MB each time. The table asks for the config values it shows
(`columns`) and the list leaves configs out (`brief`); a poll (`changed_after`) sends only the runs
whose `updated` moved. Filtering or sorting by a config value reads the configs here, once per
request, instead of in every browser.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, or_, select

from services.tracker.db import Project, Run, RunTag, Series
from services.tracker.store.base import StoreBase, flatten, run_to_dict

SORTABLE = {"created": Run.created, "name": Run.name, "status": Run.status, "updated": Run.updated}


@dataclass
class RunQuery:
    project: str | None = None
    status: str | None = None
    tags: list[str] = field(default_factory=list)
    tag_mode: str = "all"             # all: every tag must be on the run; any: at least one
    q: str | None = None
    parent: str | None = None
    top: bool = False                 # only runs without a parent (children are listed under theirs)
    config: list[str] = field(default_factory=list)   # "dotted.path=value" conditions, all must hold
    sort: str = "created"             # a column, "metric:<key>" or "config:<dotted path>"
    desc: bool = True
    metrics: list[str] = field(default_factory=list)  # keys whose last value each row carries
    columns: list[str] = field(default_factory=list)  # config paths whose value each row carries
    brief: bool = False               # leave each run's whole config out
    changed_after: float | None = None
    limit: int = 100
    offset: int = 0


def parse_condition(text: str) -> tuple[str, Any]:
    """`optim.lr=0.001` -> ("optim.lr", 0.001): the value as JSON when it parses, else as text."""
    if "=" not in text:
        raise ValueError(f"config filter {text!r} must read path=value (e.g. optim.lr=0.001)")
    path, raw = text.split("=", 1)
    try:
        return path.strip(), json.loads(raw)
    except ValueError:
        return path.strip(), raw


def _matches(flat: dict[str, Any], conditions: list[tuple[str, Any]]) -> bool:
    return all(path in flat and (flat[path] == want or str(flat[path]) == str(want)) for path, want in conditions)


def _sort_key(value: Any) -> tuple:
    """Numbers before text, None last whatever the order (a missing value is not the smallest)."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, bool | int | float):
        return (0, float(value), "")
    return (1, 0, json.dumps(value) if not isinstance(value, str) else value)


class RunTableStore(StoreBase):
    def _filtered(self, f: RunQuery):
        stmt = select(Run, Project.name).join(Project, Project.id == Run.project_id)
        if f.project:
            stmt = stmt.where(Project.name == f.project)
        if f.status:
            stmt = stmt.where(Run.status == f.status)
        if f.parent:
            stmt = stmt.where(Run.parent == f.parent)
        elif f.top:
            stmt = stmt.where(Run.parent.is_(None))
        if f.tags and f.tag_mode == "any":
            stmt = stmt.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag.in_(f.tags))))
        else:
            for tag in f.tags:
                stmt = stmt.where(Run.id.in_(select(RunTag.run_id).where(RunTag.tag == tag)))
        if f.q:
            pattern = "%" + f.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            stmt = stmt.where(or_(Run.name.ilike(pattern, escape="\\"), Run.id.ilike(pattern, escape="\\")))
        if f.changed_after is not None:
            stmt = stmt.where(Run.updated > f.changed_after)
        return stmt

    def run_table(self, f: RunQuery) -> dict[str, Any]:
        """A page of runs as the runs table shows them, with `total` (all that match) and `now`
        (the server time to send back as `changed_after` on the next poll)."""
        self.sweep_crashed()
        now = time.time()
        conditions = [parse_condition(c) for c in f.config]
        stmt = self._filtered(f)
        with self.reading() as s:
            if conditions or f.sort.startswith("config:"):
                rows = [r for r in s.execute(stmt).all() if _matches(flatten(r[0].config), conditions)]
                if f.sort.startswith("config:"):
                    path = f.sort[7:]
                    rows.sort(key=lambda r: _sort_key(flatten(r[0].config).get(path)), reverse=f.desc)
                    missing = [r for r in rows if path not in flatten(r[0].config)]
                    rows = [r for r in rows if path in flatten(r[0].config)] + missing  # missing last
                else:
                    rows.sort(key=lambda r: r[0].created, reverse=f.desc)
                total, rows = len(rows), rows[f.offset : f.offset + f.limit]
            else:
                total = s.scalar(select(func.count()).select_from(stmt.subquery()))
                if f.sort.startswith("metric:"):
                    value = (select(Series.last_value).where(Series.run_id == Run.id, Series.key == f.sort[7:])
                             .correlate(Run).scalar_subquery())
                    order = [value.is_(None), value.desc() if f.desc else value.asc()]
                else:
                    col = SORTABLE.get(f.sort)
                    if col is None:
                        raise ValueError(f"sort must be one of {', '.join(SORTABLE)}, metric:<key> or config:<path>, "
                                         f"got {f.sort!r}")
                    order = [col.desc() if f.desc else col.asc()]
                rows = s.execute(stmt.order_by(*order, Run.id).limit(f.limit).offset(f.offset)).all()
            runs = [run_to_dict(r, p) for r, p in rows]
            ids = [r["id"] for r in runs]
            self._decorate(s, runs, ids, f)
        return {"total": total, "runs": runs, "now": now}

    def _decorate(self, s, runs: list[dict[str, Any]], ids: list[str], f: RunQuery) -> None:
        """Each row's chosen metrics and config columns, its parent's name and its child count."""
        metrics: dict[str, dict[str, Any]] = {i: {} for i in ids}
        if f.metrics and ids:
            for rid, key, value, step in s.execute(
                select(Series.run_id, Series.key, Series.last_value, Series.last_step)
                .where(Series.run_id.in_(ids), Series.key.in_(f.metrics))
            ):
                metrics[rid][key] = {"value": value, "step": step}
        parents = {r["parent"] for r in runs if r["parent"]}
        names = dict(s.execute(select(Run.id, Run.name).where(Run.id.in_(parents))).all()) if parents else {}
        kids = dict(s.execute(select(Run.parent, func.count()).where(Run.parent.in_(ids)).group_by(Run.parent)).all()) \
            if ids else {}
        for r in runs:
            flat = flatten(r["config"]) if f.columns else {}
            r["metrics"] = metrics[r["id"]]
            r["columns"] = {c: flat.get(c) for c in f.columns}
            r["parent_name"] = names.get(r["parent"])
            r["children"] = kids.get(r["id"], 0)
            if f.brief:
                del r["config"]
