"""`Run.finish()` says what reached the server: stored, left spooled and refused, as counts."""

from __future__ import annotations

import httpx

from shared import tracking
from shared.net import free_port
from tests.shared.tracking.conftest import start_run


def test_a_delivered_run_reports_every_point_stored(tracker):
    run = start_run(tracker)
    for step in range(200):
        run.log({"loss": 1.0, "lr": 0.1}, step=step)
    got = run.finish()
    assert got.complete
    assert (got.points_logged, got.points_stored, got.points_spooled, got.refused) == (400, 400, 0, 0)
    assert run.finish() is got  # a second call returns the same counts


def test_an_unreachable_server_leaves_points_spooled_and_not_complete(tracker):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = tracking.init(url=url, project="t", spool_dir=str(tracker.spool), retry_max_s=0.2, flush_interval=0.02)
    for step in range(50):
        run.log({"loss": 1.0}, step=step)
    got = run.finish(timeout=2)
    assert not got.complete
    assert (got.points_stored, got.points_spooled) == (0, 50)
    assert got.ops_spooled == 3 and got.spool_path == str(run._spool.path)  # init, points, finish


def test_offline_mode_reports_its_points_as_spooled(tracker):
    run = start_run(tracker, mode="offline")
    run.log({"loss": 1.0}, step=0)
    got = run.finish()
    assert not got.complete and got.points_spooled == 1 and got.points_stored == 0


def test_refused_items_are_counted_and_their_points_are_not_stored(tracker, monkeypatch):
    from services.tracker import routes_data
    from services.tracker.validation import parse_batch

    def refuses_lr(raw):  # a server that no longer takes the key "lr"
        batch, refused = parse_batch(raw)
        refused += [{"item": "metrics.lr", "error": "key retired"}] if "lr" in batch.metrics else []
        return batch.model_copy(update={"metrics": {k: v for k, v in batch.metrics.items() if k != "lr"}}), refused

    monkeypatch.setattr(routes_data, "parse_batch", refuses_lr)
    run = start_run(tracker, flush_interval=30)
    for step in range(10):
        run.log({"loss": 1.0, "lr": 0.1}, step=step)
    got = run.finish()
    assert not got.complete
    assert (got.points_logged, got.points_stored, got.refused) == (20, 10, 1)
    assert got.rejected_path == str(run._spool.rejected_path)
    stored = httpx.get(f"{tracker.url}/api/runs/{run.id}/series", params={"key": "loss"}).json()["total"]
    assert stored == got.points_stored


def test_disabled_mode_reports_nothing_delivered(tmp_path):
    run = tracking.init(project="t", mode="disabled", spool_dir=str(tmp_path))
    run.log({"loss": 1.0}, step=0)
    got = run.finish()
    assert not got.complete and got.mode == "disabled" and got.points_logged == 0


def test_a_resumed_run_continues_its_steps_and_keeps_its_metadata(tracker):
    run = start_run(tracker, name="first", config={"lr": 1}, tags=["a"])
    for _ in range(3):
        run.log({"loss": 1.0})
    run.finish()
    again = tracking.init(id=run.id, url=tracker.url, token=tracker.token, spool_dir=str(tracker.spool),
                          flush_interval=0.02)
    again.log({"loss": 0.5})
    again.log({"loss": 0.4})
    again.finish()
    steps = httpx.get(f"{tracker.url}/api/runs/{run.id}/series", params={"key": "loss"}).json()["steps"]
    assert steps == [0, 1, 2, 3, 4]
    info = httpx.get(f"{tracker.url}/api/runs/{run.id}").json()
    assert (info["name"], info["config"], info["tags"], info["project"]) == ("first", {"lr": 1}, ["a"], "t")


def test_resuming_under_another_project_fails_in_the_caller(tracker):
    import pytest

    run = start_run(tracker)
    run.finish()
    with pytest.raises(ValueError, match="belongs to project 't'"):
        start_run(tracker, id=run.id, project="other")
