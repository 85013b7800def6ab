"""The runs table's API: chosen metric and config columns, sorting by them, config filters, pages
past 500 runs, lists without configs, and polls that return only what changed."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store


@pytest.fixture
def api(db_url):
    store = Store(db_url)  # SQLite and PostgreSQL
    client = TestClient(create_app(store=store), base_url="http://127.0.0.1")
    client.headers["authorization"] = f"Bearer {store.create_token('test')}"
    client.store = store
    yield client
    store.engine.dispose()


def _run(api, rid, lr, loss=None, **body):
    assert api.post("/api/runs", json={"id": rid, "project": "p", "config": {"optim": {"lr": lr}, "pad": "x" * 2000},
                                       **body}).status_code == 201
    if loss is not None:
        batch = {"batch_id": rid, "metrics": {"loss": {"steps": [0, 1], "walls": [1.0, 2.0], "values": [9.0, loss]}}}
        assert api.post(f"/api/runs/{rid}/batch", json=batch).status_code == 200


def test_rows_carry_chosen_metric_and_config_columns_and_sort_by_them(api):
    _run(api, "a", 3e-4, loss=2.5)
    _run(api, "b", 1e-3, loss=1.5)
    _run(api, "c", 1e-4)  # no loss yet
    got = api.get("/api/runs", params={"metric": "loss", "column": "optim.lr", "sort": "metric:loss", "desc": False,
                                       "brief": True}).json()
    assert [r["id"] for r in got["runs"]] == ["b", "a", "c"]  # a run without the metric comes last
    assert got["runs"][0]["metrics"]["loss"] == {"value": 1.5, "step": 1}
    assert got["runs"][0]["columns"] == {"optim.lr": 1e-3} and "config" not in got["runs"][0]
    by_lr = api.get("/api/runs", params={"sort": "config:optim.lr", "desc": True}).json()
    assert [r["id"] for r in by_lr["runs"]] == ["b", "a", "c"]
    assert api.get("/api/runs", params={"sort": "nonsense"}).status_code == 422


def test_runs_filter_by_config_value_tag_and_status(api):
    _run(api, "a", 3e-4, tags=["moe"])
    _run(api, "b", 1e-3, tags=["moe"])
    _run(api, "c", 1e-3)
    api.post("/api/runs/c/finish", json={"status": "failed"})
    ids = lambda **p: sorted(r["id"] for r in api.get("/api/runs", params=p).json()["runs"])  # noqa: E731
    assert ids(config="optim.lr=0.001") == ["b", "c"]
    assert ids(config="optim.lr=0.001", tag="moe") == ["b"]
    assert ids(status="failed") == ["c"]
    assert api.get("/api/runs", params={"config": "optim.lr"}).status_code == 422


def test_several_tags_match_all_of_them_or_any_of_them(api):
    _run(api, "a", 3e-4, tags=["moe", "fp8"])
    _run(api, "b", 1e-3, tags=["moe"])
    _run(api, "c", 1e-3, tags=["dense"])
    _run(api, "d", 1e-3)
    ids = lambda **p: sorted(r["id"] for r in api.get("/api/runs", params=p).json()["runs"])  # noqa: E731
    assert ids(tag=["moe", "fp8"]) == ["a"]  # all, the default
    assert ids(tag=["moe", "fp8"], tag_mode="all") == ["a"]
    assert ids(tag=["fp8", "dense"], tag_mode="any") == ["a", "c"]
    assert ids(tag=["moe", "fp8"], tag_mode="any") == ["a", "b"]  # a run with both is listed once
    assert api.get("/api/runs", params={"tag": ["moe", "fp8"], "tag_mode": "any"}).json()["total"] == 2
    assert api.get("/api/runs", params={"tag": "moe", "tag_mode": "some"}).status_code == 422


def test_pages_reach_past_500_runs(api):
    for i in range(620):
        api.post("/api/runs", json={"id": f"r{i:04d}", "project": "p", "created": 1000.0 + i})
    seen = []
    for offset in range(0, 700, 250):
        page = api.get("/api/runs", params={"limit": 250, "offset": offset, "brief": True}).json()
        assert page["total"] == 620
        seen += [r["id"] for r in page["runs"]]
    assert len(seen) == len(set(seen)) == 620 and seen[0] == "r0619" and seen[-1] == "r0000"


def test_a_poll_returns_only_the_runs_changed_since_the_last_answer(api):
    _run(api, "a", 3e-4)
    _run(api, "b", 1e-3)
    first = api.get("/api/runs", params={"brief": True}).json()
    time.sleep(0.01)
    batch = {"batch_id": "x1", "metrics": {"loss": {"steps": [5], "walls": [1.0], "values": [0.5]}}}
    api.post("/api/runs/b/batch", json=batch)
    poll = api.get("/api/runs", params={"brief": True, "changed_after": first["now"], "metric": "loss"}).json()
    assert [r["id"] for r in poll["runs"]] == ["b"] and poll["runs"][0]["metrics"]["loss"]["value"] == 0.5
    quiet = api.get("/api/runs", params={"brief": True, "changed_after": poll["now"]}).json()
    assert quiet["runs"] == []


def test_children_are_counted_and_name_their_parent(api):
    api.post("/api/runs", json={"id": "pipe", "project": "p", "name": "demo-pipeline"})
    for stage in ("filter", "train"):
        api.post("/api/runs", json={"id": stage, "project": "p", "name": f"demo-{stage}", "parent": "pipe"})
    top = api.get("/api/runs", params={"top": True}).json()
    assert [(r["id"], r["children"]) for r in top["runs"]] == [("pipe", 2)]
    kids = api.get("/api/runs", params={"parent": "pipe"}).json()["runs"]
    assert {r["parent_name"] for r in kids} == {"demo-pipeline"}


def test_a_fork_copies_the_sources_points_up_to_its_step(api):
    _run(api, "src", 1e-3)
    steps = list(range(10))
    batch = {"batch_id": "s", "metrics": {"loss": {"steps": steps, "walls": [1.0 + s for s in steps],
                                                   "values": [10.0 - s for s in steps]}},
             "histograms": [{"key": "router/load/layer0", "step": s, "wall": 1.0, "values": [1.0, 2.0]} for s in steps]}
    assert api.post("/api/runs/src/batch", json=batch).status_code == 200
    fork = api.post("/api/runs", json={"id": "f", "fork_of": "src", "fork_step": 3})
    assert fork.status_code == 201 and fork.json()["config"]["optim"] == {"lr": 1e-3} and fork.json()["project"] == "p"
    loss = api.get("/api/runs/f/series", params={"key": "loss"}).json()
    assert loss["steps"] == [0, 1, 2, 3] and loss["values"] == [10.0, 9.0, 8.0, 7.0]
    assert api.get("/api/runs/f/histograms", params={"key": "router/load/layer0"}).json()["steps"] == [0, 1, 2, 3]
    assert api.get("/api/runs/src/series", params={"key": "loss"}).json()["total"] == 10


def test_a_store_made_before_forks_is_upgraded_and_keeps_its_runs(tmp_path):
    from sqlalchemy import inspect, text

    url = f"sqlite:///{tmp_path}/old.db"
    old = Store(url)
    old.create_token("t")
    with old.engine.begin() as conn:
        conn.execute(text("INSERT INTO projects (name, created) VALUES ('p', 1.0)"))
        conn.execute(text("INSERT INTO runs (id, project_id, name, config, tags, status, created, updated) "
                          "VALUES ('r1', 1, 'old run', '{}', '[]', 'finished', 1.0, 1.0)"))
        conn.execute(text("DROP INDEX ix_runs_fork_of"))
        conn.execute(text("ALTER TABLE runs DROP COLUMN fork_of"))
        conn.execute(text("ALTER TABLE runs DROP COLUMN fork_step"))
    old.engine.dispose()
    store = Store(url)
    columns = {c["name"] for c in inspect(store.engine).get_columns("runs")}
    assert {"fork_of", "fork_step"} <= columns
    assert "ix_runs_fork_of" in {i["name"] for i in inspect(store.engine).get_indexes("runs")}
    assert store.get_run("r1")["fork_of"] is None and store.get_run("r1")["name"] == "old run"
    store.engine.dispose()
