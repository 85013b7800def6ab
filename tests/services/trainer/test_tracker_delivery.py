"""The trainer's result says whether its tracker run reached the server (counts from `Run.finish()`)."""

from __future__ import annotations

from services.trainer.launch import run_local
from tests.services.trainer.conftest import tiny_cfg


def test_an_offline_tracker_run_is_reported_as_spooled_in_the_result(tmp_path, doc_globs, caplog):
    cfg = tiny_cfg(tmp_path, doc_globs, "train.steps=3", "tracker.mode=offline", f"tracker.spool_dir={tmp_path}/spool")
    result = run_local(cfg)
    assert result["tracker_complete"] is False
    assert result["tracker_points_logged"] > 0
    assert result["tracker_points_spooled"] == result["tracker_points_logged"]
    assert result["tracker_points_stored"] == 0
    assert any("NOT fully delivered" in r.getMessage() for r in caplog.records)
