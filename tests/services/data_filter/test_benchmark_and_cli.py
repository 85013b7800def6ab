"""The benchmark's quick mode runs and ends with its JSON line; the CLI filters and inspects."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from moelab.cli import app
from tests.benchmark_run import run_benchmark
from tests.services.data_filter import realtext


@pytest.mark.slow
def test_benchmark_quick_prints_ratio_and_agreement_last():
    last = run_benchmark("data_filter.py", "--quick")
    assert last["ratio"] > 0 and 0 <= last["agreement"] <= 1
    assert last["agreement"] >= 0.99, last  # same keep decisions on the shared rules
    assert last["kept_ours"] > 0


@pytest.mark.slow
def test_data_quality_quick_removes_planted_garbage_and_tracks_the_lsh_curve():
    last = run_benchmark("data_quality.py", "--quick")
    removed = last["removed_by_kind"]
    assert removed["boilerplate"] == removed["repetition"] == removed["other_language"] == removed["gibberish"] == 1.0, removed
    # a third of the corpus leaves the small handbook locales (~12 pages) without fences: the word-order test alone
    assert removed["shuffled"] >= 0.95 and removed["word_salad"] >= 0.95 and removed["profanity"] >= 0.9, removed
    assert last["clean_kept_min"] >= 0.97, last["clean_kept"]
    assert last["clean_lost_to_toxicity"] <= 0.02 and last["clusters_lost_by_dedup"] == 0
    assert last["near_dup_max_abs_diff"] <= 0.05, last["near_dup_curve"]
    assert 0.95 <= last["f1"] <= 1.0


def test_cli_filter_then_inspect(tmp_path):
    src = tmp_path / "in.jsonl"
    recs = [{"id": f"m{i}", "text": realtext.prose_doc(3, start=i * 3)} for i in range(12)]
    recs.append({"id": "de", "text": " ".join(realtext.udhr("de"))})
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs) + "not json\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({
        "tracker": {"mode": "disabled"},
        "data": {"inputs": [{"name": "manual", "kind": "web", "paths": [str(src)]}], "out_dir": str(tmp_path / "out")},
    }))
    runner = CliRunner()
    res = runner.invoke(app, ["data", "filter", str(recipe), "data.filter.workers=0"])
    assert res.exit_code == 0, res.output
    assert "funnel: read 14 -> valid 13" in res.output
    assert "source manual: read 14 -> valid 13 -> filters" in res.output
    res = runner.invoke(app, ["data", "inspect", str(tmp_path / "out"), "--reason", "language_not_kept"])
    assert res.exit_code == 0, res.output
    assert "language:language_not_kept  id=de" in res.output
    res = runner.invoke(app, ["data", "inspect", str(tmp_path / "out"), "--rejects"])
    assert "malformed_json" in res.output
    bad = runner.invoke(app, ["data", "filter", str(recipe), "data.filter.chains.web.language.min_score=2"])
    assert bad.exit_code == 2 and "min_score" in bad.output
