"""The tracker's data model (SQLAlchemy 2) and engine set-up for SQLite (WAL) or PostgreSQL.

Why scalars are stored in chunks: a training run logs millions of scalar points (one per key per
step). One row per point makes ingest and a 1M-point query slow on any SQL store, so a series
(run, key) keeps its points in `metric_chunks` rows of up to `CHUNK_POINTS` points each, as three
packed little-endian arrays (step int64, wall time float64, value float64). Logically it is still
the table (run, key, step, wall, value); NaN/Inf survive as IEEE values, never as NULL.
Ingest adds one row per batch and merges a series' partial chunks every `COMPACT_AFTER` batches,
so ingest never rewrites a growing blob and a query reads ~N/8192 + 32 rows. Chunks are read back
in id order and sorted by step only when a replay made them arrive out of order. Each chunk also
stores a rollup (the min and max point of every 64 points) so a 1M-point query reads ~31k points.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

CHUNK_POINTS = 8192
COMPACT_AFTER = 32  # partial chunks per series before they are merged into full ones


class Base(DeclarativeBase):
    pass


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created: Mapped[float] = mapped_column(Float, default=time.time)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    tags: Mapped[list] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    git_commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    parent: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    created: Mapped[float] = mapped_column(Float, index=True)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated: Mapped[float] = mapped_column(Float)
    # last sign of life (init, batch, heartbeat): a running run silent for crash_after_s is crashed
    last_seen: Mapped[float | None] = mapped_column(Float, nullable=True)
    # a fork: the run this one was started from, and the last step of it that this run carries
    fork_of: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    fork_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class RunTag(Base):
    """One row per (run, tag) so that search by tag is an indexed lookup on every backend."""

    __tablename__ = "run_tags"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class Series(Base):
    """One scalar series (run, key) with running summaries the run page shows without a scan."""

    __tablename__ = "series"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    n_points: Mapped[int] = mapped_column(Integer, default=0)
    n_nan: Mapped[int] = mapped_column(Integer, default=0)
    n_posinf: Mapped[int] = mapped_column(Integer, default=0)
    n_neginf: Mapped[int] = mapped_column(Integer, default=0)
    first_nonfinite_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    n_small: Mapped[int] = mapped_column(Integer, default=0)
    last_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    __table_args__ = (UniqueConstraint("run_id", "key"),)


class MetricChunk(Base):
    __tablename__ = "metric_chunks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("series.id", ondelete="CASCADE"), index=True)
    n: Mapped[int] = mapped_column(Integer)
    min_step: Mapped[int] = mapped_column(BigInteger)
    max_step: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    # min and max point of every BLOCK points (downsample.block_extremes), for queries over big series
    nb: Mapped[int] = mapped_column(Integer)
    rollup: Mapped[bytes] = mapped_column(LargeBinary)


class Histogram(Base):
    """A vector per (run, key, step): per-expert token counts (a heatmap row) or binned values."""

    __tablename__ = "histograms"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(BigInteger)
    wall: Mapped[float] = mapped_column(Float)
    values: Mapped[list] = mapped_column(JSON)
    edges: Mapped[list | None] = mapped_column(JSON, nullable=True)
    __table_args__ = (Index("ix_histograms_run_key_step", "run_id", "key", "step"),)


class EventRow(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict] = mapped_column(JSON, default=dict)
    step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    wall: Mapped[float] = mapped_column(Float)


class Artifact(Base):
    __tablename__ = "artifacts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    meta: Mapped[dict] = mapped_column(JSON, default=dict)
    created: Mapped[float] = mapped_column(Float)


class IngestedBatch(Base):
    """Batch ids already stored: a replayed batch (spool, retry after a timeout) is stored once."""

    __tablename__ = "ingested_batches"
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)


class ApiToken(Base):
    """API tokens with a scope (read < write < admin); only the SHA-256 of a token is stored."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created: Mapped[float] = mapped_column(Float, default=time.time)
    revoked: Mapped[bool] = mapped_column(default=False)
    scope: Mapped[str] = mapped_column(String(8), default="write", server_default="write")


class BrowserSession(Base):
    """A dashboard login: the browser holds a random session id (HttpOnly cookie), never the token.

    A session grants reads only and dies with its token (revoking the token ends its sessions)."""

    __tablename__ = "browser_sessions"
    session_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    created: Mapped[float] = mapped_column(Float)
    expires: Mapped[float] = mapped_column(Float)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the dashboard read while a writer appends; NORMAL sync is durable at checkpoints
    # and is SQLite's recommended setting for WAL.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    """Create the engine and the tables. `sqlite:///runs/tracker.db` makes `runs/` if needed."""
    if is_sqlite(url):
        path = url.split(":///", 1)[1] if ":///" in url else ""
        if path and path != ":memory:":
            Path(os.path.dirname(os.path.abspath(path))).mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=16)
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_size=16, max_overflow=16, pool_pre_ping=True)
    Base.metadata.create_all(engine)
    upgrade(engine)
    return engine


def upgrade(engine: Engine) -> None:
    """Bring a store made by an older tracker up to these tables: add the columns (and the fork
    index) it lacks and widen 32-bit step columns on PostgreSQL (SQLite's INTEGER is 64-bit already)."""
    insp = inspect(engine)
    added = {("runs", "last_seen"): "FLOAT", ("api_tokens", "scope"): "VARCHAR(8) DEFAULT 'write' NOT NULL",
             ("runs", "fork_of"): "VARCHAR(64)", ("runs", "fork_step"): "BIGINT"}
    with engine.begin() as conn:
        for (table, column), ddl in added.items():
            if column not in {c["name"] for c in insp.get_columns(table)}:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))
        conn.execute(text("CREATE INDEX IF NOT EXISTS ix_runs_fork_of ON runs (fork_of)"))
        if not is_sqlite(str(engine.url)):
            for table, column in (("histograms", "step"), ("events", "step"), ("artifacts", "size")):
                kind = next(c["type"] for c in insp.get_columns(table) if c["name"] == column)
                if not isinstance(kind, BigInteger):
                    conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT"))
