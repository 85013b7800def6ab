"""Every read and write the API does, on SQLite or PostgreSQL through one SQLAlchemy engine.

`Store` is assembled from one part per concern: `auth` (tokens, sessions), `runs` (runs,
heartbeats, lineage), `table` (the runs table), `ingest` (batches, chunks, compaction), `series` (scalar reads,
downsampling, zoom ranges) and `queries` (histograms, events, artifacts, config diffs).
"""

from __future__ import annotations

from services.tracker.store.auth import SCOPES, TokenStore, hash_token, scope_allows
from services.tracker.store.base import Conflict, NotFound, flatten, run_to_dict
from services.tracker.store.ingest import IngestStore
from services.tracker.store.queries import QueryStore
from services.tracker.store.runs import RunStore
from services.tracker.store.series import SeriesStore
from services.tracker.store.table import RunQuery, RunTableStore


class Store(TokenStore, RunStore, RunTableStore, IngestStore, SeriesStore, QueryStore):
    """The tracker's store at `url` (`sqlite:///runs/tracker.db` or a PostgreSQL URL)."""


__all__ = ["SCOPES", "Conflict", "NotFound", "RunQuery", "Store", "flatten", "hash_token", "run_to_dict", "scope_allows"]
