"""Scoring's inputs: a 0-row input shard is a counted skip, not a crash after a whole pass."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from services.scorer.scoring import run_scoring
from shared.config import ExperimentConfig


def test_an_empty_input_shard_is_counted_and_skipped(tmp_path):
    empty = tmp_path / "in" / "part-00000.parquet"
    empty.parent.mkdir()
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string()),
                             "source": pa.array([], pa.string())}), empty)
    cfg = ExperimentConfig()
    cfg.scorer.out_dir = str(tmp_path / "scorer")
    report = run_scoring(cfg, [str(empty)], progress=False)
    assert report["shards_empty"] == 1 and report["empty_inputs"] == [str(empty)]
    assert report["shards_scored"] == 0 and report["shards_pending"] == 0 and report["docs"] == 0
    manifest = json.loads((tmp_path / "scorer" / "scores" / "manifest.json").read_text())
    assert manifest["shards"] == [] and manifest["empty_inputs"] == [str(empty.resolve())]
    assert run_scoring(cfg, [str(empty)], progress=False)["shards_empty"] == 1  # and every rerun the same


def test_score_run_cli_takes_an_address_and_names_a_missing_filter_output(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from moelab.cli import app

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), empty)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"tracker": {"mode": "disabled"}, "data": {"out_dir": str(tmp_path / "filtered")},
                                      "scorer": {"out_dir": str(tmp_path / "scorer")}}))
    runner = CliRunner()
    res = runner.invoke(app, ["score", "run", str(recipe), f"scorer.inputs=[{empty}]", "--address", "ray://nowhere:1"])
    assert res.exit_code == 0, res.output
    assert '"shards_empty": 1' in res.output
    missing = runner.invoke(app, ["score", "run", str(recipe)])
    assert missing.exit_code == 2 and "manifest.json" in missing.output and "moelab data filter" in missing.output
