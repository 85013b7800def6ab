"""The edit-loss benchmark runs on a small sample and files a result that names its code and machine."""

from __future__ import annotations

import json

from tests.benchmark_run import run_benchmark


def test_edit_loss_small_sample_reports_every_source_and_records_its_commit(tmp_path):
    out = tmp_path / "edit_loss.json"
    result = run_benchmark("edit_loss.py", "--per-source", "3", "--out", str(out), timeout=600)
    assert json.loads(out.read_text()) == result
    assert result["benchmark"] == "edit_loss" and result["commit"] and result["cores"]
    assert {"man_pages", "licences", "web_wiki", "web_handbook"} <= set(result["sources"])
    for row in result["sources"].values():
        assert row["kept"] <= row["docs"]
    assert 0.0 <= result["web_past_0.5"] <= 1.0
