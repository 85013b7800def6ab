"""A calibration report warns (logged and stored) when the early exit turns itself off or a keep rate misses its target."""

from __future__ import annotations

import logging
import math

from services.scorer.calibration_warnings import attach_warnings


def _report(tau_drop: float, realised: float) -> dict:
    return {"tau_drop": {"all-rubrics": tau_drop},
            "calibration": {"keepers_per_tau_drop": {"all-rubrics": 4}, "fitted_on": "40 unlabelled documents"},
            "keep_rate": {"web": {"target": 0.30, "realised": realised, "n": 200}}}


def test_early_exit_off_and_a_keep_rate_at_12_percent_of_30_are_warned(caplog):
    with caplog.at_level(logging.WARNING):
        report = attach_warnings(_report(-math.inf, 0.12))
    assert len(report["warnings"]) == 2
    assert "early exit off for all-rubrics" in report["warnings"][0] and "4 Judge keepers" in report["warnings"][0]
    assert "keep rate of web misses its target: 12% kept on 200 held-out documents vs 30% asked" in report["warnings"][1]
    assert caplog.text.count("early exit off") == 1 and "misses its target" in caplog.text


def test_a_working_early_exit_and_a_keep_rate_near_target_warn_nothing():
    assert attach_warnings(_report(-0.2, 0.27))["warnings"] == []


def test_the_calibrate_stage_stores_its_warnings_in_the_report_and_sends_each_to_the_tracker(tmp_path):
    """Calibrated on 24 unlabelled documents, no τ_drop can keep the keeper-loss promise: the stage must
    say so in calibrate_report.json and as a tracker `warning` event, not only in a log line."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from services.scorer import pipeline
    from services.scorer.sample_docs import python_docs
    from shared.config.loader import load_config

    docs = python_docs(40, 40, seed=0, max_chars=300)
    inp = tmp_path / "filtered"
    inp.mkdir()
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs],
                             "source": [d["source"] for d in docs], "meta": ["{}"] * len(docs)}), inp / "part-0.parquet")
    recipe = tmp_path / "scorer.yaml"
    recipe.write_text(
        f"name: scorer-warnings\ntracker: {{mode: offline, spool_dir: {tmp_path / 'spool'}}}\n"
        "data: {inputs: [{name: pydoc, kind: web, paths: [x]}, {name: stdlib, kind: code, paths: [x]}]}\n"
        f"scorer:\n  out_dir: {tmp_path / 'out'}\n  inputs: ['{inp}/*.parquet']\n  oracle: {{sample_size: 80}}\n"
        "  heads: {max_tokens: 64, window_tokens: 64, judge_dim: 32, judge_heads: 2, max_epochs: 2, patience: 2}\n"
    )
    cfg = load_config(str(recipe))
    pipeline.label_stage(cfg, docs=docs)
    pipeline.train_stage(cfg)
    unlabelled = [{**d, "id": f"cal-{d['id']}"} for d in python_docs(12, 12, seed=3, max_chars=300)]
    report = pipeline.calibrate_stage(cfg, docs=unlabelled)

    stored = json.loads((tmp_path / "out" / "calibrate_report.json").read_text())
    assert stored["warnings"] == report["warnings"] and any("early exit off" in w for w in stored["warnings"])
    ops = [json.loads(line) for p in (tmp_path / "spool").glob("*.jsonl") for line in p.read_text().splitlines()]
    events = [e for op in ops if op["op"] == "batch" for e in op["body"]["events"]]
    assert [e["message"] for e in events if e["kind"] == "warning"] == stored["warnings"]
