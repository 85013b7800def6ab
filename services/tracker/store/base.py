"""What every part of the store shares: the engine, the write lock, sessions and row → dict helpers.

Why a process-wide write lock on SQLite: SQLite allows one writer at a time, and letting 8
threads race for its file lock means busy-waits and timeouts; one Python lock makes them queue
fairly. PostgreSQL takes concurrent writers and row locks (`FOR UPDATE`) serialise appends to the
same series.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy.orm import Session

from services.tracker import db
from services.tracker.db import Run


class NotFound(LookupError):
    pass


class Conflict(ValueError):
    """The request contradicts what the store holds (e.g. resuming a run under another project)."""


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
        "last_seen": run.last_seen,
        "fork_of": run.fork_of,
        "fork_step": run.fork_step,
    }


def escape_key(part: str) -> str:
    """A config key as one part of a dotted path: `\\` and `.` escaped, so `{"lr_x0.1": 1}` and
    `{"lr_x0": {"1": 1}}` flatten to different paths (`lr_x0\\.1` and `lr_x0.1`)."""
    return str(part).replace("\\", "\\\\").replace(".", "\\.")


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys (`model.moe.top_k`), the form config overrides use; a dot or a
    backslash inside one key is escaped (`escape_key`) so that no two paths collide."""
    if isinstance(config, dict) and config:
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(flatten(v, f"{prefix}{escape_key(k)}."))
        return out
    return {prefix[:-1]: config} if prefix else {}


class StoreBase:
    def __init__(self, url: str, cache_series: int = 64, crash_after_s: float = 120.0):
        self.url = url
        self.engine = db.make_engine(url)
        self.sqlite = db.is_sqlite(url)
        self.crash_after_s = crash_after_s
        self._write_lock = threading.Lock() if self.sqlite else None
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._cache_size = cache_series
        self._cache_lock = threading.Lock()

    @contextlib.contextmanager
    def writing(self):
        lock = self._write_lock or contextlib.nullcontext()
        with lock, Session(self.engine) as s, s.begin():
            yield s

    @contextlib.contextmanager
    def writing_core(self):
        """A Core connection in one transaction, behind the SQLite write lock (the ingest path)."""
        lock = self._write_lock or contextlib.nullcontext()
        with lock, self.engine.begin() as conn:
            yield conn

    def reading(self) -> Session:
        return Session(self.engine)

    def insert_ignore(self, table):
        """INSERT … ON CONFLICT DO NOTHING for this backend (no failed statement, no savepoint)."""
        if self.sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        return insert(table).on_conflict_do_nothing()

    def cached(self, ck: tuple, load):
        """LRU cache of series reads per (series id, version, what): a dashboard polling a 1M-point
        series pays the unpacking once per new batch, not once per poll."""
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
