"""Label cache: valid oracle labels in Parquet, keyed by content hash + rubric version + oracle model.

Why: oracle calls are the expensive part (a 120B model per document), so a rerun, a resumed run
or a second experiment over overlapping data must never pay twice. Only schema-valid labels are
cached; failures are retried on the next run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from services.scorer.io import write_parquet_atomic


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cache_key(text: str, rubric_key: str, model: str) -> str:
    return f"{content_hash(text)}:{rubric_key}:{model}"


class LabelCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._rows: dict[str, dict] = {}
        self._dirty = False
        if self.path.exists():
            for row in pq.read_table(self.path).to_pylist():
                self._rows[row["key"]] = row

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> dict[str, int] | None:
        row = self._rows.get(key)
        return None if row is None else json.loads(row["scores"])

    def put(self, key: str, scores: dict[str, int], raw: str) -> None:
        self._rows[key] = {"key": key, "scores": json.dumps(scores, sort_keys=True), "raw": raw}
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty:
            return
        rows = list(self._rows.values())
        table = pa.table({k: [r[k] for r in rows] for k in ("key", "scores", "raw")})
        write_parquet_atomic(table, self.path)
        self._dirty = False
