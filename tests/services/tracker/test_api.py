"""REST API against a real store: SQLite (WAL file) and a throwaway PostgreSQL server."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store

LOCAL = "http://127.0.0.1"  # the tracker answers only the Host names it is known by


@pytest.fixture
def api(db_url):
    store = Store(db_url)
    token = store.create_token("test")
    client = TestClient(create_app(store=store, max_body_bytes=2 * 1024 * 1024), base_url=LOCAL)
    client.headers["authorization"] = f"Bearer {token}"
    yield client
    store.engine.dispose()


def _nested(depth):
    out = 1
    for _ in range(depth):
        out = [out]
    return out


def _batch(bid, key, steps, values, **extra):
    return {"batch_id": bid, "metrics": {key: {"steps": steps, "walls": [1000.0 + s for s in steps], "values": values}}, **extra}


def test_create_log_query_finish_and_resume(api):
    r = api.post("/api/runs", json={"id": "r1", "project": "p", "name": "first", "config": {"model": {"top_k": 2}},
                                     "tags": ["moe", "fp8"], "git_commit": "abc1234", "host": "box", "parent": "pipe1"})
    assert r.status_code == 201, r.text
    assert r.json()["resumed"] is False
    assert api.post("/api/runs/r1/batch", json=_batch("b1", "loss", [0, 1, 2], [3.0, 2.5, 2.0])).json()["points"] == 3
    assert api.post("/api/runs/r1/batch", json=_batch("b2", "loss", [3, 4], [1.9, 1.8])).json()["points"] == 2
    s = api.get("/api/runs/r1/series", params={"key": "loss"}).json()
    assert s["steps"] == [0, 1, 2, 3, 4] and s["values"] == [3.0, 2.5, 2.0, 1.9, 1.8]
    assert s["walls"][0] == 1000.0
    keys = api.get("/api/runs/r1/keys").json()
    assert keys["scalars"][0] == {"key": "loss", "points": 5, "nonfinite": 0, "last_step": 4, "last_value": 1.8}
    assert api.post("/api/runs/r1/finish", json={"status": "finished"}).json()["status"] == "finished"
    r = api.post("/api/runs", json={"id": "r1", "project": "p"})
    assert r.status_code == 200 and r.json()["resumed"] and r.json()["status"] == "running"
    assert r.json()["name"] == "first" and r.json()["parent"] == "pipe1"


def test_a_replayed_batch_id_is_stored_once(api):
    api.post("/api/runs", json={"id": "r1"})
    body = _batch("same", "loss", [0, 1], [1.0, 2.0])
    assert api.post("/api/runs/r1/batch", json=body).json()["stored"] is True
    assert api.post("/api/runs/r1/batch", json=body).json() == {"stored": False, "duplicate": True, "points": 0}
    assert api.get("/api/runs/r1/series", params={"key": "loss"}).json()["total"] == 2


def test_nonfinite_values_are_explicit_strings_counted_and_returned_as_gaps(api):
    api.post("/api/runs", json={"id": "r1"})
    body = _batch("b", "loss", [0, 1, 2, 3], [1.0, "NaN", "Infinity", "-Infinity"])
    assert api.post("/api/runs/r1/batch", json=body).status_code == 200
    s = api.get("/api/runs/r1/series", params={"key": "loss"}).json()
    assert s["values"] == [1.0, None, None, None]
    assert s["nonfinite"] == {"nan": 1, "inf": 1, "-inf": 1, "first_step": 1}
    # a bare NaN token (invalid JSON) and any other string are refused, never stored
    raw = '{"batch_id": "x", "metrics": {"loss": {"steps": [9], "walls": [1.0], "values": [NaN]}}}'
    assert api.post("/api/runs/r1/batch", content=raw).status_code == 422
    assert api.post("/api/runs/r1/batch", json=_batch("y", "loss", [9], ["1.5"])).status_code == 422
    assert api.get("/api/runs/r1/series", params={"key": "loss"}).json()["total"] == 4


@pytest.mark.parametrize(
    "body",
    [
        {"id": "has space"},
        {"project": " padded"},
        {"tags": ["line\nbreak"]},
        {"tags": ["x" * 65]},
        {"config": {"deep": _nested(40)}},
        {"name": "line\nbreak"},
        {"config": {"x": 1}, "unknown": 1},
    ],
)
def test_invalid_run_fields_are_refused(api, body):
    assert api.post("/api/runs", json=body).status_code == 422


def test_invalid_batches_are_refused_with_reasons(api):
    api.post("/api/runs", json={"id": "r1"})
    r = api.post("/api/runs/r1/batch", json={"batch_id": "b", "metrics": {"loss": {"steps": [1, 2], "walls": [1.0], "values": [1.0]}}})
    assert r.status_code == 422 and "same length" in r.text
    r = api.post("/api/runs/r1/batch", json=_batch("b", "bad\u0000key", [1], [1.0]))
    assert r.status_code == 422
    assert api.post("/api/runs/nope/batch", json=_batch("b", "loss", [1], [1.0])).status_code == 404


def test_body_over_the_limit_is_refused(api):
    api.post("/api/runs", json={"id": "r1"})
    n = 150_000
    body = _batch("big", "loss", list(range(n)), [1.0] * n)
    assert len(json.dumps(body)) > 2 * 1024 * 1024
    assert api.post("/api/runs/r1/batch", json=body).status_code == 413


def test_writes_without_a_valid_token_are_refused(db_url):
    store = Store(db_url)
    client = TestClient(create_app(store=store), base_url=LOCAL)
    assert client.post("/api/runs", json={"id": "r1"}).status_code == 401
    assert client.post("/api/runs", json={"id": "r1"}, headers={"authorization": "Bearer wrong"}).status_code == 403
    assert client.get("/api/runs").json()["total"] == 0
    token = store.create_token()
    assert client.post("/api/runs", json={"id": "r1"}, headers={"authorization": f"Bearer {token}"}).status_code == 201
    store.engine.dispose()


def test_read_protection_requires_a_token_for_reads(db_url):
    store = Store(db_url)
    token = store.create_token()
    client = TestClient(create_app(store=store, read_protected=True), base_url=LOCAL)
    assert client.get("/api/runs").status_code == 401
    assert client.get("/api/runs", headers={"authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/healthz").status_code == 200
    store.engine.dispose()


def test_list_and_search_by_tag_status_project_and_text(api):
    for i, (tags, status) in enumerate([(["moe"], "finished"), (["moe", "fp8"], "running"), (["dense"], "failed")]):
        api.post("/api/runs", json={"id": f"r{i}", "project": "p" if i < 2 else "q", "name": f"run_{i}%", "tags": tags})
        if status != "running":
            api.post(f"/api/runs/r{i}/finish", json={"status": status})
    ids = lambda **q: sorted(r["id"] for r in api.get("/api/runs", params=q).json()["runs"])  # noqa: E731
    assert ids(tag="moe") == ["r0", "r1"]
    assert ids(tag=["moe", "fp8"]) == ["r1"]
    assert ids(status="failed") == ["r2"]
    assert ids(project="p") == ["r0", "r1"]
    assert ids(q="run_1") == ["r1"]
    assert ids(q="%") == ["r0", "r1", "r2"]  # LIKE wildcards in the query are literal
    assert ids(q="r_n") == []  # '_' is literal too (as a LIKE wildcard it would match "run")
    projects = api.get("/api/projects").json()
    assert projects == [{"name": "p", "runs": 2}, {"name": "q", "runs": 1}]


def test_config_diff_and_compare(api):
    api.post("/api/runs", json={"id": "a", "config": {"model": {"top_k": 2, "dense": False}, "seed": 1, "only_a": 1}})
    api.post("/api/runs", json={"id": "b", "config": {"model": {"top_k": 4, "dense": False}, "seed": 1}})
    d = api.get("/api/diff", params={"a": "a", "b": "b"}).json()
    assert d["differences"] == [
        {"key": "model.top_k", "a": 2, "b": 4, "in_a": True, "in_b": True},
        {"key": "only_a", "a": 1, "b": None, "in_a": True, "in_b": False},
    ]
    assert d["same"] == 2
    api.post("/api/runs/a/batch", json=_batch("1", "loss", [0, 1], [2.0, 1.0]))
    api.post("/api/runs/b/batch", json=_batch("2", "loss", [0, 1], [2.5, 1.5]))
    c = api.get("/api/compare", params={"runs": ["a", "b"], "key": ["loss", "absent"]}).json()
    assert [r["id"] for r in c["runs"]] == ["a", "b"]
    assert c["series"]["loss"]["b"]["values"] == [2.5, 1.5]
    assert "absent" not in c["series"]


def test_histograms_events_and_artifacts_round_trip(api):
    api.post("/api/runs", json={"id": "r1"})
    body = {
        "batch_id": "b",
        "histograms": [{"key": "router/load/layer0", "step": s, "wall": 1.0, "values": [s, 2, 3, 4]} for s in range(10)],
        "events": [{"kind": "router_health", "message": "dead expert", "data": {"expert": 3}, "step": 5, "wall": 2.0}],
        "artifacts": [{"name": "ckpt", "kind": "checkpoint", "path": "/x/ckpt", "sha256": "a" * 64, "size": 10}],
    }
    assert api.post("/api/runs/r1/batch", json=body).status_code == 200
    h = api.get("/api/runs/r1/histograms", params={"key": "router/load/layer0", "max_steps": 5}).json()
    assert len(h["steps"]) == 5 and h["steps"][0] == 0 and h["steps"][-1] == 9 and h["values"][-1] == [9, 2, 3, 4]
    assert api.get("/api/runs/r1/events").json()[0]["data"] == {"expert": 3}
    assert api.get("/api/runs/r1/artifacts").json()[0]["sha256"] == "a" * 64


def test_series_is_downsampled_server_side_keeping_extremes(api):
    api.post("/api/runs", json={"id": "r1"})
    n = 20_000
    values = [math.sin(i / 50) for i in range(n)]
    values[12_345] = 50.0  # one spike must survive downsampling
    api.post("/api/runs/r1/batch", json=_batch("b", "loss", list(range(n)), values))
    s = api.get("/api/runs/r1/series", params={"key": "loss", "points": 200}).json()
    assert s["total"] == n and s["returned"] <= 200
    assert 50.0 in s["values"] and 12_345 in s["steps"]
    assert min(s["values"]) == min(values)


def test_openapi_documents_the_api(api):
    paths = api.get("/openapi.json").json()["paths"]
    for p in ("/api/runs", "/api/runs/{run_id}/batch", "/api/runs/{run_id}/series", "/api/compare", "/api/diff"):
        assert p in paths


def test_run_page_escapes_the_run_name(api):
    api.post("/api/runs", json={"id": "x1", "name": "<script>alert(1)</script>"})
    html = api.get("/runs/x1").text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert api.get("/static/vendor/uPlot.iife.min.js").status_code == 200


def test_many_small_batches_are_compacted_without_reordering_points(api):
    from sqlalchemy import func, select

    from services.tracker.db import COMPACT_AFTER, MetricChunk

    api.post("/api/runs", json={"id": "r1"})
    step = 0
    sizes = [10] * 100 + [20_000] + [7] * 70
    for i, size in enumerate(sizes):
        body = _batch(f"b{i}", "loss", list(range(step, step + size)), [float(s) for s in range(step, step + size)])
        assert api.post("/api/runs/r1/batch", json=body).status_code == 200
        step += size
    s = api.get("/api/runs/r1/series", params={"key": "loss", "points": 100_000}).json()
    assert s["total"] == step and s["steps"] == list(range(step)) and s["values"] == [float(x) for x in range(step)]
    store = api.app.state.store
    with store.reading() as sess:
        chunks = sess.scalar(select(func.count()).select_from(MetricChunk))
    assert chunks <= step // 8192 + 2 * COMPACT_AFTER


def test_out_of_order_replayed_points_come_back_sorted_on_both_query_paths(api):
    api.post("/api/runs", json={"id": "r1"})
    late, early = list(range(10_000, 20_000)), list(range(10_000))
    api.post("/api/runs/r1/batch", json=_batch("late", "loss", late, [float(s) for s in late]))
    api.post("/api/runs/r1/batch", json=_batch("early", "loss", early, [float(s) for s in early]))
    raw = api.get("/api/runs/r1/series", params={"key": "loss", "points": 100_000}).json()
    assert raw["steps"] == list(range(20_000))
    small = api.get("/api/runs/r1/series", params={"key": "loss", "points": 100}).json()
    assert small["steps"] == sorted(small["steps"]) and small["steps"][0] == 0 and small["steps"][-1] == 19_999
