"""Raw JSONL documents become one Parquet copy per file, never one copy per file *name*."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq

from services.trainer.data import materialize_raw
from tests.services.trainer.conftest import tiny_cfg, write_docs


def _jsonl(path: Path, prefix: str, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps({"id": f"{prefix}{i}", "text": f"{prefix} text {i} " * 20}) + "\n" for i in range(n))
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(body.encode()))
    else:
        path.write_text(body)


def test_two_raw_files_with_the_same_stem_in_different_folders_keep_both_copies(tmp_path):
    _jsonl(tmp_path / "a" / "notes.jsonl", "a", 3)
    _jsonl(tmp_path / "b" / "notes.jsonl.gz", "b", 5)
    cfg = tiny_cfg(tmp_path, (write_docs(tmp_path / "t", ["x" * 300], "web"), write_docs(tmp_path / "e", ["y" * 300], "web")))
    out = tmp_path / "copies"
    copies = materialize_raw(cfg, [str(tmp_path / "a" / "*.jsonl"), str(tmp_path / "b" / "*.jsonl.gz")], out)
    assert len(set(copies)) == 2
    tables = [pq.read_table(c) for c in copies]
    assert sorted(t.num_rows for t in tables) == [3, 5]
    ids = sorted(i for t in tables for i in t.column("id").to_pylist())
    assert ids == sorted([f"a{i}" for i in range(3)] + [f"b{i}" for i in range(5)])
    assert {s for t in tables for s in t.column("source").to_pylist()} == {"notes"}  # the stem rates name

    again = materialize_raw(cfg, [str(tmp_path / "a" / "*.jsonl"), str(tmp_path / "b" / "*.jsonl.gz")], out)
    assert again == copies and sorted(pq.read_metadata(c).num_rows for c in again) == [3, 5]


def test_parquet_files_beside_raw_ones_in_one_pattern_are_kept(tmp_path):
    _jsonl(tmp_path / "mixed" / "notes.jsonl", "n", 2)
    parquet = Path(write_docs(tmp_path / "mixed", ["z" * 300], "web").replace("*.parquet", "part-0.parquet"))
    cfg = tiny_cfg(tmp_path, (str(parquet), str(parquet)))
    got = materialize_raw(cfg, [str(tmp_path / "mixed" / "*")], tmp_path / "copies")
    assert str(parquet) in got and len(got) == 2
