"""Document ids the scorer cannot key on (duplicates, non-strings, missing) are counted per source,
marked on the rows, and shown by `data filter` and `data inspect`; no document is dropped for them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from moelab.cli import app
from services.data_filter.pipeline import run
from shared.config.data import DataConfig
from shared.data.stage_outputs import declared_outputs
from tests.services.data_filter import realtext

_NO_ID = object()
A_IDS = ["x", "x", 7, 7.5, [1], _NO_ID, None, True, "y"]
B_IDS = ["x", "z"]


def _write(path: Path, ids: list, start: int) -> Path:
    lines = []
    for i, doc_id in enumerate(ids):
        rec = {"text": realtext.prose_doc(3, start=(start + i) * 3)}
        if doc_id is not _NO_ID:
            rec["id"] = doc_id
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(tmp_path: Path) -> dict:
    a = _write(tmp_path / "a.jsonl", A_IDS, 0)
    b = _write(tmp_path / "b.jsonl", B_IDS, 20)
    cfg = DataConfig.model_validate({"inputs": [{"name": "a", "kind": "web", "paths": [str(a)]},
                                                {"name": "b", "kind": "web", "paths": [str(b)]}],
                                     "filter": {"workers": 0}})
    return run(cfg, tmp_path / "out")


def test_duplicate_missing_and_non_string_ids_are_counted_per_source(tmp_path):
    stats = _run(tmp_path)
    assert stats["written"] == len(A_IDS) + len(B_IDS), "an id problem must not drop a document"
    ids = stats["ids"]
    assert ids["duplicate_read"] == 2 and ids["duplicate_written"] == 2 and ids["duplicate_examples"] == ["x"]
    assert ids["missing"] == 2 and ids["not_string"] == 4
    assert ids["issues"] == {"missing": 2, "not_string:bool": 1, "not_string:float": 1, "not_string:int": 1,
                             "not_string:list": 1}
    a, b = stats["sources"]["a"]["ids"], stats["sources"]["b"]["ids"]
    assert (a["duplicate_read"], b["duplicate_read"]) == (1, 1)  # counted where the repeat occurs
    assert (a["not_string"], b["not_string"], b["missing"]) == (4, 0, 0)


def test_each_row_says_how_its_id_was_made(tmp_path):
    _run(tmp_path)
    table = pa.concat_tables(pq.read_table(p) for p in declared_outputs(tmp_path / "out"))
    rows = dict(zip(table.column("id").to_pylist(), (json.loads(m) for m in table.column("meta").to_pylist()), strict=False))
    assert rows["7"]["id_issue"] == "not_string:int"
    assert rows["a/a.jsonl#6"]["id_issue"] == "missing"  # named by file and line
    assert rows["a/a.jsonl#4"]["id_issue"] == "not_string:float"
    assert "id_issue" not in rows["y"]


def test_data_filter_and_inspect_print_the_id_counts(tmp_path):
    _run(tmp_path)
    res = CliRunner().invoke(app, ["data", "inspect", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "ids: 2 duplicates read, 2 written; 4 not strings, 2 missing" in res.output
    assert "e.g. x" in res.output
    only_b = CliRunner().invoke(app, ["data", "inspect", str(tmp_path / "out"), "--source", "b"])
    assert "ids: 1 duplicates read, 1 written; 0 not strings, 0 missing" in only_b.output
