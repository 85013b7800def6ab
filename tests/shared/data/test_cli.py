"""`moelab data tokenize|mixture-stats` on a real (small) corpus, without Ray."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from moelab.cli import app

runner = CliRunner()


def _config(tmp_path, docs_path, **mixture):
    cfg = {
        "train": {"seq_len": 32, "micro_batch_size": 2},
        "mixture": {
            "documents": [str(docs_path)],
            "shard_dir": str(tmp_path / "tokens"),
            "tokenizer": {"out_dir": str(tmp_path / "tok"), "vocab_size": 600},
            "rates": {"web": 0.6, "code": 0.3, "intl": 0.1},
            "use_ray": False,
            **mixture,
        },
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_tokenize_then_mixture_stats_report_tokens_epochs_and_deviation(tmp_path, docs_path):
    cfg = _config(tmp_path, docs_path)
    first = runner.invoke(app, ["data", "tokenize", cfg])
    assert first.exit_code == 0, first.output
    assert "intl" in first.output and "items built" in first.output
    manifest = json.loads((tmp_path / "tokens" / "manifest.json").read_text())
    again = runner.invoke(app, ["data", "tokenize", cfg])  # same tokenizer reused, every item skipped
    assert again.exit_code == 0 and "items built 0" in again.output
    assert json.loads((tmp_path / "tokens" / "manifest.json").read_text())["shards"] == manifest["shards"]

    result = runner.invoke(app, ["data", "mixture-stats", cfg, "--budget", "200000", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)  # --json prints the JSON and nothing else, so a script can parse it
    assert set(stats["sources"]) == {"web", "code", "intl"}
    assert sum(s["tokens"] for s in stats["sources"].values()) == stats["tokens"] >= 200_000
    assert stats["worst_prefix_deviation"] <= 0.01
    assert stats["sources"]["intl"]["epochs"] > 1  # the tiny source repeats, and the table says so
    table = runner.invoke(app, ["data", "mixture-stats", cfg, "--budget", "200000"])
    assert "worst prefix deviation" in table.output and "'intl' is repeated" in table.output


def test_mixture_stats_in_stop_mode_says_where_it_stopped(tmp_path, docs_path):
    cfg = _config(tmp_path, docs_path, on_exhausted="stop")
    assert runner.invoke(app, ["data", "tokenize", cfg]).exit_code == 0
    result = runner.invoke(app, ["data", "mixture-stats", cfg, "--budget", "200000"])
    assert result.exit_code == 0, result.output
    assert "stopped early" in result.output and "'intl' ran out" in result.output


def test_missing_documents_and_shards_fail_with_a_clear_message(tmp_path):
    cfg = _config(tmp_path, tmp_path / "nothing-*.parquet")
    result = runner.invoke(app, ["data", "tokenize", cfg])
    assert result.exit_code == 1 and "no Parquet documents match" in result.output
    result = runner.invoke(app, ["data", "mixture-stats", cfg, "--budget", "1000"])
    assert result.exit_code == 1 and "moelab data tokenize" in result.output
