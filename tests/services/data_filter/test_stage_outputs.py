"""The filter's declared output is what the next stages read: its manifest, never its work files;
and the CLI's `--workers`/`--address` options configure a run instead of breaking its config."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from moelab.cli import app
from services.scorer.stage_support import input_paths
from shared.config import load_config
from shared.data.prepare import document_paths
from shared.data.shards import ShardError
from shared.data.stage_outputs import StageOutputError, declared_outputs
from tests.services.data_filter import realtext


def _recipe(tmp_path, n_docs: int = 12):
    src = tmp_path / "in.jsonl"
    recs = [{"id": f"m{i}", "text": realtext.prose_doc(3, start=i * 3)} for i in range(n_docs)]
    recs.append({"id": "copy", "text": recs[0]["text"]})  # a duplicate: in work/units, not in the output
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "tracker": {"mode": "disabled"},
        "data": {"inputs": [{"name": "manual", "kind": "web", "paths": [str(src)]}], "out_dir": str(tmp_path / "out"),
                 "filter": {"shard_docs": 5}},
    }))
    return recipe


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("filtered")
    recipe = _recipe(tmp_path)
    res = CliRunner().invoke(app, ["data", "filter", str(recipe), "--workers", "0"])
    assert res.exit_code == 0, res.output
    return tmp_path, recipe


def test_cli_workers_0_filters_in_process(filtered):
    tmp_path, _ = filtered
    assert (tmp_path / "out" / "manifest.json").is_file()
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["near_duplicates"] == 1 and stats["written"] >= 1


def test_setting_workers_or_address_keeps_the_chains_validated():
    cfg = load_config(None, [])
    cfg.data.filter.workers = 0
    cfg.data.filter.ray_address = "ray://head:10001"
    assert all(hasattr(c, "model_dump") for c in cfg.data.filter.chains.values())
    assert cfg.data.filter.model_dump_json()  # what the Ray actors are sent


def test_scorer_and_tokenizer_read_exactly_the_declared_shards(filtered):
    tmp_path, recipe = filtered
    out = tmp_path / "out"
    assert list((out / "work").rglob("*.parquet")), "the run should leave per-unit work files for this test to mean much"
    declared = [out / s["name"] for s in json.loads((out / "manifest.json").read_text())["shards"]]
    cfg = load_config(recipe, [])
    assert [str(p) for p in declared] == input_paths(cfg)
    assert declared == document_paths(cfg)
    rows = sum(pq.read_metadata(p).num_rows for p in input_paths(cfg))
    assert rows == json.loads((out / "stats.json").read_text())["written"]  # every kept document once


def test_a_leftover_shard_is_not_read(filtered, tmp_path):
    src, recipe = filtered
    cfg = load_config(recipe, [])
    leftover = src / "out" / "part-09999.parquet"  # e.g. from an earlier run that wrote more shards
    leftover.write_bytes((src / "out" / "part-00000.parquet").read_bytes())
    try:
        assert str(leftover) not in input_paths(cfg)
    finally:
        leftover.unlink()


def test_no_manifest_means_the_stage_has_not_finished(tmp_path):
    (tmp_path / "work" / "units").mkdir(parents=True)
    (tmp_path / "work" / "units" / "u.parquet").write_bytes(b"x")
    with pytest.raises(StageOutputError, match="moelab data filter"):
        declared_outputs(tmp_path)
    cfg = load_config(None, [f"data.out_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        input_paths(cfg)
    with pytest.raises(ShardError, match="manifest.json"):
        document_paths(cfg)


def test_a_shard_changed_after_the_manifest_is_refused(tmp_path):
    (tmp_path / "part-00000.parquet").write_bytes(b"12345")
    (tmp_path / "manifest.json").write_text(json.dumps({"shards": [{"name": "part-00000.parquet", "bytes": 4}]}))
    with pytest.raises(StageOutputError, match="changed after"):
        declared_outputs(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"shards": [{"name": "part-00001.parquet", "bytes": 4}]}))
    with pytest.raises(StageOutputError, match="missing"):
        declared_outputs(tmp_path)
