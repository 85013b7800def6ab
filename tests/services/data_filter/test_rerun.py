"""A rerun into an existing out_dir rebuilds what a changed input or setting touches, and only that;
the result equals a fresh run on the new inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from services.data_filter.pipeline import run
from services.data_filter.rerun import RunMismatch
from shared.config.data import DataConfig
from shared.data.stage_outputs import declared_outputs
from tests.services.data_filter import realtext


def _records(prefix: str, n: int, start: int = 0) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "text": realtext.prose_doc(3, start=(start + i) * 3)} for i in range(n)]


def _write(path: Path, records: list[dict]) -> Path:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(body, mtime=0) if path.suffix == ".gz" else body)
    return path


def _config(paths: dict[str, Path], **filt) -> DataConfig:
    return DataConfig.model_validate({
        "inputs": [{"name": name, "kind": "web", "paths": [str(p)]} for name, p in paths.items()],
        "filter": {"workers": 0, **filt},
    })


def _rows(out: Path) -> list[tuple]:
    table = pa.concat_tables(pq.read_table(p) for p in declared_outputs(out))
    return list(zip(*(table.column(c).to_pylist() for c in ("id", "text", "source", "meta")), strict=True))


def _counting(units: list[int]):
    return lambda done, total: units.append(done)


def test_an_appended_input_rebuilds_its_own_units_only_and_equals_a_fresh_run(tmp_path, caplog):
    a = _write(tmp_path / "a.jsonl", _records("a", 12))
    b = _write(tmp_path / "b.jsonl", _records("b", 12, start=20))
    cfg = _config({"a": a, "b": b})
    first = run(cfg, tmp_path / "out")
    assert "rebuilt" not in first
    b_unit = next(tmp_path.glob("out/work/units/u000001.json"))
    b_stamp = b_unit.stat().st_mtime_ns

    _write(a, _records("a", 12) + _records("late", 3, start=40))
    with caplog.at_level("WARNING"):
        again = run(cfg, tmp_path / "out")
    assert "a.jsonl changed" in again["rebuilt"] and "1 of 2 units" in again["rebuilt"]
    assert "a.jsonl changed" in caplog.text
    assert b_unit.stat().st_mtime_ns == b_stamp, "the unchanged input's unit was filtered again"
    assert again["records"] == first["records"] + 3

    fresh = run(cfg, tmp_path / "fresh")
    assert _rows(tmp_path / "out") == _rows(tmp_path / "fresh")
    assert again["written"] == fresh["written"]
    assert any(r[0].startswith("late-") for r in _rows(tmp_path / "out"))


def test_a_rerun_with_nothing_changed_keeps_everything(tmp_path):
    a = _write(tmp_path / "a.jsonl", _records("a", 6))
    cfg = _config({"a": a})
    run(cfg, tmp_path / "out")
    manifest = (tmp_path / "out" / "manifest.json").read_text()
    done: list[int] = []
    stats = run(cfg, tmp_path / "out", progress=_counting(done))
    assert done == [1] and "rebuilt" not in stats  # the one unit was already finished
    assert (tmp_path / "out" / "manifest.json").read_text() == manifest


def test_a_compressed_input_edited_in_place_is_filtered_again(tmp_path):
    a = _write(tmp_path / "a.jsonl.gz", _records("a", 6))
    cfg = _config({"a": a})
    run(cfg, tmp_path / "out")
    _write(a, _records("edited", 6, start=10))  # same name, other bytes
    again = run(cfg, tmp_path / "out")
    assert "changed" in again["rebuilt"]
    assert {r[0].split("-")[0] for r in _rows(tmp_path / "out")} == {"edited"}


def test_other_filter_settings_rebuild_every_unit_and_equal_a_fresh_run(tmp_path):
    a = _write(tmp_path / "a.jsonl", _records("a", 10))
    run(_config({"a": a}), tmp_path / "out")
    again = run(_config({"a": a}, shard_docs=3), tmp_path / "out")
    assert "settings changed" in again["rebuilt"]
    run(_config({"a": a}, shard_docs=3), tmp_path / "fresh")
    assert _rows(tmp_path / "out") == _rows(tmp_path / "fresh")
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*.parquet")) == \
        sorted(p.name for p in (tmp_path / "fresh").glob("part-*.parquet")), "a shard of the old layout was left"


def test_a_removed_input_leaves_none_of_its_documents(tmp_path):
    a = _write(tmp_path / "a.jsonl", _records("a", 6))
    b = _write(tmp_path / "b.jsonl", _records("b", 6, start=20))
    run(_config({"a": a, "b": b}), tmp_path / "out")
    again = run(_config({"a": a}), tmp_path / "out")
    assert again["rebuilt"]
    assert {r[2] for r in _rows(tmp_path / "out")} == {"a"}


def test_an_input_inside_out_dir_is_refused_with_the_command_to_run(tmp_path):
    a = _write(tmp_path / "a.jsonl", _records("a", 6))
    run(_config({"a": a}), tmp_path / "out")
    inner = _write(tmp_path / "out" / "again.jsonl", _records("b", 3))
    with pytest.raises(RunMismatch, match=r"moelab data filter CONFIG data.out_dir=.*out-2"):
        run(_config({"a": a, "b": inner}), tmp_path / "out")
    assert (tmp_path / "out" / "manifest.json").is_file(), "a refused rerun must leave the old output alone"
