"""What the run page and the compare page read: complete or counted lists, bounded reads, resumes
that keep what they change, and config paths that cannot collide."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store, flatten

LOCAL = "http://127.0.0.1"


@pytest.fixture
def api(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    client = TestClient(create_app(store=store), base_url=LOCAL)
    client.headers["authorization"] = f"Bearer {store.create_token('test')}"
    yield client
    store.engine.dispose()


def _batch(bid, key, steps, values=None, **extra):
    values = values or [float(s) for s in steps]
    return {"batch_id": bid, "metrics": {key: {"steps": steps, "walls": [1000.0 + s for s in steps], "values": values}},
            **extra}


def _events(n, kind="router_health"):
    return [{"kind": kind, "message": f"e{i}", "data": {}, "step": i, "wall": 1000.0 + i} for i in range(n)]


def test_events_say_how_many_match_and_page_past_the_first_thousand(api):
    api.post("/api/runs", json={"id": "r1", "project": "p"})
    funnel = {"kind": "funnel", "message": "f", "data": {"name": "documents", "stages": []}, "step": None, "wall": 5000.0}
    api.post("/api/runs/r1/batch", json={"batch_id": "b1", "events": _events(1200) + [funnel]})
    first = api.get("/api/runs/r1/events")
    assert len(first.json()) == 1000 and first.headers["x-total-count"] == "1201"
    rest = api.get("/api/runs/r1/events", params={"offset": 1000})
    assert [e["message"] for e in rest.json()][:2] == ["e1000", "e1001"] and len(rest.json()) == 201
    plain = api.get("/api/runs/r1/events", params={"exclude": ["funnel", "calibration"], "limit": 5000})
    assert plain.headers["x-total-count"] == "1200" and all(e["kind"] != "funnel" for e in plain.json())
    assert len(api.get("/api/runs/r1/events", params={"kind": "funnel"}).json()) == 1


def test_unknown_runs_are_404_for_events_and_artifacts(api):
    assert api.get("/api/runs/nope/events").status_code == 404
    assert api.get("/api/runs/nope/artifacts").status_code == 404


def test_compare_reads_a_repeated_run_or_key_once_and_refuses_too_many_points(api):
    api.post("/api/runs", json={"id": "r1", "project": "p"})
    api.post("/api/runs/r1/batch", json=_batch("b1", "loss", [0, 1, 2]))
    got = api.get("/api/compare", params={"runs": ["r1", "r1"], "key": ["loss", "loss"]})
    assert got.status_code == 200 and [r["id"] for r in got.json()["runs"]] == ["r1"]
    big = api.get("/api/compare", params={"runs": [f"r{i}" for i in range(32)], "key": [f"k{i}" for i in range(64)],
                                          "points": 100_000})
    assert big.status_code == 422 and "the limit is" in big.json()["detail"]


def test_last_step_is_the_highest_step_not_the_last_to_arrive(api):
    api.post("/api/runs", json={"id": "r1", "project": "p"})
    api.post("/api/runs/r1/batch", json=_batch("b2", "loss", [5, 6], [0.5, 0.6]))
    api.post("/api/runs/r1/batch", json=_batch("b1", "loss", [0, 1], [3.0, 2.0]))  # a replayed spool, late
    key = api.get("/api/runs/r1/keys").json()["scalars"][0]
    assert (key["last_step"], key["last_value"]) == (6, 0.6)


def test_a_resume_stores_the_metadata_it_changes_and_keeps_the_rest(api):
    api.post("/api/runs", json={"id": "r1", "project": "p", "name": "first", "config": {"lr": 1}, "tags": ["a"]})
    api.post("/api/runs", json={"id": "r1", "name": "second", "tags": ["b", "c"]})
    run = api.get("/api/runs/r1").json()
    assert (run["name"], run["config"], run["tags"], run["project"]) == ("second", {"lr": 1}, ["b", "c"], "p")
    assert [r["id"] for r in api.get("/api/runs", params={"tag": "c"}).json()["runs"]] == ["r1"]
    assert api.get("/api/runs", params={"tag": "a"}).json()["total"] == 0
    moved = api.post("/api/runs", json={"id": "r1", "project": "elsewhere"})
    assert moved.status_code == 409 and "belongs to project 'p'" in moved.json()["detail"]


def test_config_keys_with_dots_do_not_collide_with_nested_keys(api):
    assert flatten({"lr_x0.1": 1}) != flatten({"lr_x0": {"1": 1}})
    api.post("/api/runs", json={"id": "a", "project": "p", "config": {"lr_x0.1": 1}})
    api.post("/api/runs", json={"id": "b", "project": "p", "config": {"lr_x0.1": 2}})
    diff = api.get("/api/diff", params={"a": "a", "b": "b"}).json()["differences"]
    assert [d["key"] for d in diff] == ["lr_x0\\.1"] and (diff[0]["a"], diff[0]["b"]) == (1, 2)


def test_a_point_logged_twice_at_one_step_is_read_once_with_the_later_value(api):
    api.post("/api/runs", json={"id": "r1", "project": "p"})
    api.post("/api/runs/r1/batch", json=_batch("b1", "loss", [0, 1, 2], [3.0, 2.0, 1.0]))
    api.post("/api/runs/r1/batch", json=_batch("b2", "loss", [1], [5.0]))  # step 1 again
    got = api.get("/api/runs/r1/series", params={"key": "loss"}).json()
    assert got["steps"] == [0, 1, 2] and got["values"] == [3.0, 5.0, 1.0]
    zoom = api.get("/api/runs/r1/series", params={"key": "loss", "start": 1, "end": 1}).json()
    assert zoom["steps"] == [1] and zoom["values"] == [5.0]
