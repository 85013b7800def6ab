"""An arm's documents as Parquet (id, text, source), with every held-out text taken out.

Why by text: arms come from different stages (raw JSONL, the filter's output, the scorer's kept
set) whose ids need not agree, and a held-out document must never be trained on by any arm, or the
arm holding it would look better for the wrong reason. A document whose exact text is in the
held-out set is dropped and counted; a record without a string `text` (a malformed line) is
counted with its file and reason; nothing is dropped silently.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shared.data.atomic import atomic_write_bytes

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")


class RecipeError(ValueError):
    """An arm's data recipe that cannot be used (a glob matching nothing, no document left)."""


@dataclass
class DocumentCounts:
    files: int = 0
    read: int = 0
    written: int = 0
    held_out_removed: int = 0
    malformed: dict[str, int] = field(default_factory=dict)  # file -> records without a string text

    def as_dict(self) -> dict:
        return {"files": self.files, "read": self.read, "written": self.written,
                "held_out_removed": self.held_out_removed, "malformed": dict(self.malformed)}


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def expand(patterns: list[str], what: str) -> list[Path]:
    """Files matching `patterns` (JSONL, .jsonl.gz or Parquet); a pattern matching none is an error."""
    files: list[Path] = []
    for pattern in patterns:
        found = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
        if not found:
            raise RecipeError(f"{what}: {pattern!r} matches no file (run the stage that makes it, or fix the path)")
        files.extend(found)
    for f in files:
        if not (f.name.endswith(JSONL_SUFFIXES) or f.suffix == ".parquet"):
            raise RecipeError(f"{what}: {f} is neither JSONL (.jsonl, .jsonl.gz) nor Parquet")
    return list(dict.fromkeys(files))


def read_rows(path: Path, counts: DocumentCounts) -> Iterator[dict]:
    """(id, text, source) rows of one file; records without a string `text` are counted per file."""
    stem = path.name.split(".")[0]
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        cols = set(table.column_names)
        if "text" not in cols:
            raise RecipeError(f"{path}: Parquet file has no `text` column (columns: {sorted(cols)})")
        for i, row in enumerate(table.to_pylist()):
            if not isinstance(row.get("text"), str):
                counts.malformed[str(path)] = counts.malformed.get(str(path), 0) + 1
                continue
            yield {"id": str(row.get("id") or f"{stem}-{i}"), "text": row["text"], "source": str(row.get("source") or stem)}
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                counts.malformed[str(path)] = counts.malformed.get(str(path), 0) + 1
                continue
            yield {"id": str(rec.get("id") or f"{stem}-{i}"), "text": rec["text"], "source": str(rec.get("source") or stem)}


def held_out_keys(eval_files: list[Path], out: Path) -> tuple[set[bytes], DocumentCounts]:
    """Write the held-out documents to `out` (one Parquet) and return their text keys."""
    counts = DocumentCounts(files=len(eval_files))
    rows = []
    for f in eval_files:
        for row in read_rows(f, counts):
            counts.read += 1
            rows.append(row)
    if not rows:
        raise RecipeError(f"ablation.eval_documents: {len(eval_files)} file(s) hold no document with a text; "
                          "the held-out set must not be empty")
    counts.written = len(rows)
    _write(rows, out)
    return {text_key(r["text"]) for r in rows}, counts


def write_arm_documents(arm: str, files: list[Path], held_out: set[bytes], out_dir: Path) -> tuple[list[Path], DocumentCounts]:
    """One Parquet per input file under `out_dir`, without held-out texts; returns paths and counts."""
    counts = DocumentCounts(files=len(files))
    written: list[Path] = []
    for j, f in enumerate(files):
        rows = []
        for row in read_rows(f, counts):
            counts.read += 1
            if text_key(row["text"]) in held_out:
                counts.held_out_removed += 1
                continue
            rows.append(row)
        if rows:
            target = out_dir / f"{j:04d}-{f.name.split('.')[0]}.parquet"
            _write(rows, target)
            written.append(target)
            counts.written += len(rows)
    if not written:
        raise RecipeError(f"ablation arm {arm!r}: no document left ({counts.read} read, {counts.held_out_removed} "
                          f"held out, malformed {sum(counts.malformed.values())})")
    return written, counts


def _write(rows: list[dict], path: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("id", pa.string()), ("text", pa.string()),
                                                                 ("source", pa.string())])), sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
