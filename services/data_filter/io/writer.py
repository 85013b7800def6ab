"""Atomic, deterministic file writes: Parquet shards, JSON and JSONL (temp file + os.replace).

Parquet shards use fixed writer settings (zstd, no dictionary-dependent options that vary by
run) so the same rows give byte-identical files, which is how a resumed run is checked against
an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

OUTPUT_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("source", pa.string()), ("meta", pa.string())])


def _tmp(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return tmp


def write_parquet(table: pa.Table, path: str | os.PathLike) -> Path:
    path = Path(path)
    tmp = _tmp(path)
    try:
        pq.write_table(table, tmp, compression="zstd", write_statistics=False, store_schema=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    tmp = _tmp(path)
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def write_jsonl(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    path = Path(path)
    tmp = _tmp(path)
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
