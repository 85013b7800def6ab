"""Small file helpers every scorer stage shares: atomic Parquet/JSON writes and Parquet reads."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet_atomic(table: pa.Table, path: str | Path) -> Path:
    """Write to a temp file in the same folder, then `os.replace` (readers never see half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json_atomic(obj, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")
    os.replace(tmp, path)
    return path


def read_docs(paths: list[str | Path]) -> pa.Table:
    """Concatenate Parquet files with at least `id` and `text` (the data filter's output schema)."""
    tables = []
    for p in paths:
        t = pq.read_table(p)
        missing = {"id", "text"} - set(t.column_names)
        if missing:
            raise ValueError(f"{p}: Parquet lacks column(s) {sorted(missing)}; the scorer needs id, text (and source)")
        tables.append(t)
    if not tables:
        raise ValueError("no Parquet inputs given to the scorer")
    return pa.concat_tables(tables, promote_options="default")
