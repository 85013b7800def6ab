"""A fork ("resume from step N as a new run") is a new run that starts with its source's history up
to step N, keeps the source's metadata and parent link, records where it came from, and continues
its steps at N + 1; the source is untouched."""

from __future__ import annotations

import pytest

from tests.shared.tracking.conftest import start_run


def test_a_fork_starts_with_the_sources_points_up_to_its_step_and_continues_after_it(tracker):
    pipe = start_run(tracker, name="pipeline")
    src = start_run(tracker, name="base", config={"optim": {"lr": 1e-3}}, tags=["moe"], parent=pipe.id)
    for step in range(10):
        src.log({"loss": 10.0 - step})
        src.log_histogram("router/load/layer0", [step, 1, 1], step=step)
    assert src.finish().complete
    fork = start_run(tracker, name="base-lr-drop", fork_from=src.id, fork_step=4)
    for _ in range(3):
        fork.log({"loss": 0.5})
    assert fork.finish().complete and pipe.finish().complete
    store = tracker.store
    run = store.get_run(fork.id)
    assert (run["fork_of"], run["fork_step"], run["parent"]) == (src.id, 4, pipe.id)
    assert run["config"] == {"optim": {"lr": 1e-3}} and run["tags"] == ["moe"] and run["project"] == "t"
    loss = store.series(fork.id, "loss")
    assert loss["steps"] == [0, 1, 2, 3, 4, 5, 6, 7] and loss["values"] == [10, 9, 8, 7, 6, 0.5, 0.5, 0.5]
    assert store.histograms(fork.id, "router/load/layer0")["steps"] == [0, 1, 2, 3, 4]
    assert store.series(src.id, "loss")["total"] == 10  # the source keeps its own history
    assert store.get_run(src.id)["fork_of"] is None


def test_forking_a_run_the_tracker_does_not_hold_fails_in_the_caller(tracker):
    with pytest.raises(ValueError, match="no such run"):
        start_run(tracker, fork_from="nosuchrun", fork_step=3)
    with pytest.raises(ValueError, match="go together"):
        start_run(tracker, fork_from="nosuchrun")
    with pytest.raises(ValueError, match="go together"):
        start_run(tracker, fork_step=3, mode="disabled")
    with pytest.raises(ValueError, match="new run"):
        start_run(tracker, id="abc", fork_from="nosuchrun", fork_step=1)


def test_the_api_refuses_to_fork_into_an_existing_run_and_answers_a_replayed_fork_init_as_a_resume(tracker):
    import httpx

    h = {"authorization": f"Bearer {tracker.token}"}
    httpx.post(f"{tracker.url}/api/runs", json={"id": "src", "project": "p"}, headers=h).raise_for_status()
    httpx.post(f"{tracker.url}/api/runs", json={"id": "other", "project": "p"}, headers=h).raise_for_status()
    fork = {"id": "f1", "fork_of": "src", "fork_step": 3}
    first = httpx.post(f"{tracker.url}/api/runs", json=fork, headers=h)
    again = httpx.post(f"{tracker.url}/api/runs", json=fork, headers=h)  # the spool replays an init
    assert first.status_code == 201 and first.json()["project"] == "p"
    assert again.status_code == 200 and again.json()["resumed"]
    clash = httpx.post(f"{tracker.url}/api/runs", json={"id": "other", "fork_of": "src", "fork_step": 3}, headers=h)
    assert clash.status_code == 409 and "a fork is a new run" in clash.json()["detail"]
    missing = httpx.post(f"{tracker.url}/api/runs", json={"id": "f2", "fork_of": "gone", "fork_step": 3}, headers=h)
    assert missing.status_code == 404 and "cannot be forked" in missing.json()["detail"]
