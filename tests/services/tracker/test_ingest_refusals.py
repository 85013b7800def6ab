"""Bad input never costs good input: one refused item leaves the rest of its batch stored, and every
malformed body is a 4xx naming the problem (real SQLite and PostgreSQL stores)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store

LOCAL = "http://127.0.0.1"


@pytest.fixture
def api(db_url):
    store = Store(db_url)
    client = TestClient(create_app(store=store), base_url=LOCAL)
    client.headers["authorization"] = f"Bearer {store.create_token('test')}"
    client.post("/api/runs", json={"id": "r1"})
    yield client
    store.engine.dispose()


def _points(key, n, start=0):
    steps = list(range(start, start + n))
    return {key: {"steps": steps, "walls": [1000.0 + s for s in steps], "values": [float(s) for s in steps]}}


def test_a_batch_with_one_refused_item_stores_the_rest_and_names_the_item(api):
    body = {
        "batch_id": "b1",
        "metrics": {**_points("loss", 1000), **_points("bad\nkey", 3), "lr": {"steps": [0, 1], "walls": [1.0], "values": [1.0]}},
        "events": [{"kind": "note", "message": "kept", "wall": 1.0},
                   {"kind": "bad kind with spaces", "message": "refused", "wall": 1.0},
                   {"kind": "note", "message": "nan in data", "data": {"x": float("nan")}, "wall": 1.0}],
        "histograms": [{"key": "h", "step": 0, "wall": 1.0, "values": [1, 2]},
                       {"key": "h", "step": 1, "wall": 1.0, "values": [1, 2], "edges": [0.0]}],
        "artifacts": [{"name": "ckpt", "path": "/x"}, {"name": "ckpt", "path": "/x", "sha256": "not-hex"}],
    }
    r = api.post("/api/runs/r1/batch", content=json.dumps(body))  # NaN travels as a bare NaN token
    assert r.status_code == 200, r.text
    refused = {x["item"] for x in r.json()["refused"]}
    assert refused == {"metrics.bad\nkey", "metrics.lr", "events[1]", "events[2]", "histograms[1]", "artifacts[1]"}
    assert all(x["error"] for x in r.json()["refused"])
    assert api.get("/api/runs/r1/series", params={"key": "loss"}).json()["total"] == 1000
    assert [e["message"] for e in api.get("/api/runs/r1/events").json()] == ["kept"]
    assert api.get("/api/runs/r1/histograms", params={"key": "h"}).json()["steps"] == [0]
    assert len(api.get("/api/runs/r1/artifacts").json()) == 1
    # the same batch id again is a duplicate: the stored part is not stored twice
    assert api.post("/api/runs/r1/batch", content=json.dumps(body)).json()["duplicate"] is True
    assert api.get("/api/runs/r1/series", params={"key": "loss"}).json()["total"] == 1000


def test_a_batch_whose_every_item_is_refused_is_a_422_listing_them(api):
    body = {"batch_id": "b2", "events": [{"kind": "", "wall": 1.0}]}
    r = api.post("/api/runs/r1/batch", json=body)
    assert r.status_code == 422 and "events[0]" in r.text


@pytest.mark.parametrize("raw", [
    b"not json",
    b"[1, 2]",
    b'{"metrics": {}}',  # no batch_id
    b'{"batch_id": "b", "unknown": 1}',
    b'{"batch_id": "b", "metrics": []}',
    b'{"batch_id": "b", "events": {"kind": "x"}}',
    b"\xff\xfe{}",  # not UTF-8
    b'{"batch_id": "b", "events": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested past any parser's patience
])
def test_every_malformed_batch_body_is_a_4xx(api, raw):
    r = api.post("/api/runs/r1/batch", content=raw)
    assert 400 <= r.status_code < 500, (raw[:40], r.status_code, r.text[:200])


@pytest.mark.parametrize("raw", [
    b'{"id": "n1", "config": {"lr": NaN}}',
    b'{"id": "n2", "config": {"lr": Infinity}}',
    b'{"id": "n3", "config": {"lr": 1e999}}',
    b'{"id": "n4", "created": NaN}',
    b'{"id": "n5", "tags": "not-a-list"}',
    b'{"id": "n6", "name": "\\ud800"}',
    b"",
    b"null",
])
def test_a_run_body_json_cannot_carry_is_a_4xx_and_stores_no_run(api, raw):
    r = api.post("/api/runs", content=raw)
    assert 400 <= r.status_code < 500, (raw, r.status_code, r.text[:200])
    assert {x["id"] for x in api.get("/api/runs").json()["runs"]} == {"r1"}


@pytest.mark.parametrize("path,raw", [
    ("/api/runs/r1/finish", b'{"status": "exploded"}'),
    ("/api/runs/r1/finish", b'{"wall": NaN}'),
    ("/api/runs/r1/finish", b"[]"),
    ("/api/session", b'{"token": 5}'),
])
def test_other_malformed_bodies_are_4xx(api, path, raw):
    assert 400 <= api.post(path, content=raw).status_code < 500


def test_query_parameters_out_of_range_are_4xx(api):
    api.post("/api/runs/r1/batch", json={"batch_id": "q", "metrics": _points("loss", 10)})
    for params in ({"key": "loss", "points": 1}, {"key": "loss", "start": -1}, {"key": "loss", "start": 5, "end": 2},
                   {"key": "bad\nkey"}, {"key": "loss", "start": "x"}):
        assert api.get("/api/runs/r1/series", params=params).status_code == 422, params
