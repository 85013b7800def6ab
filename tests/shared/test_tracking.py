"""The tracking client: non-blocking, spools while the server is down, replays without loss or doubles."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest

from shared import tracking
from tests.services.tracker.helpers import ServerThread


@pytest.fixture
def tracker(tmp_path):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    token = store.create_token("test")
    srv = ServerThread(lambda: create_app(store=store)).start()
    srv.token, srv.store, srv.spool = token, store, tmp_path / "spool"
    yield srv
    if srv.server and not srv.server.should_exit:
        srv.stop()
    store.engine.dispose()


def _init(srv, **kw):
    kw.setdefault("token", srv.token)
    kw.setdefault("project", "t")
    kw.setdefault("flush_interval", 0.02)
    return tracking.init(url=srv.url, spool_dir=str(srv.spool), retry_max_s=0.2, **kw)


def _points(srv, run_id, key):
    r = httpx.get(f"{srv.url}/api/runs/{run_id}/series", params={"key": key, "points": 100_000})
    return r.json()


def test_server_stopped_mid_run_loses_no_point_and_doubles_none(tracker, capsys):
    run = _init(tracker, config={"seed": 1}, name="outage")
    logged = 0
    for step in range(3000):
        if step == 1000:
            run.flush(10)
            tracker.stop()  # the server goes away mid-run
        if step == 2000:
            time.sleep(0.3)  # a few failed retries while down
            assert run._spool.exists(), "points logged while the server is down must be spooled"
            tracker.start()  # back on the same port and database
        run.log({"loss": 1.0 / (step + 1), "lr": 1e-3, "mfu": math.nan if step == 1500 else 0.3}, step=step)
        logged += 3
    run.event("stage", "done", n=3)
    run.finish(timeout=30)
    assert run.points_logged == logged
    assert not run._spool.path.exists(), "the spool must be fully replayed and removed"
    for key in ("loss", "lr", "mfu"):
        s = _points(tracker, run.id, key)
        assert s["total"] == 3000, key
        assert s["steps"] == list(range(3000)), key
    assert _points(tracker, run.id, "mfu")["nonfinite"]["nan"] == 1
    info = httpx.get(f"{tracker.url}/api/runs/{run.id}").json()
    assert info["status"] == "finished" and info["config"] == {"seed": 1}
    assert "spooling" in capsys.readouterr().err


def test_a_server_never_reached_does_not_hold_the_end_of_the_run(tracker, capsys):
    from shared.net import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = tracking.init(url=url, project="t", spool_dir=str(tracker.spool), retry_max_s=0.2, flush_interval=0.02)
    for step in range(50):
        run.log({"loss": 1.0}, step=step)
    t0 = time.monotonic()
    run.finish(timeout=30)
    assert time.monotonic() - t0 < 5  # one more try, not the 30 s window
    assert run._spool.path.exists() and f"could not reach {url}" in capsys.readouterr().err
    assert tracking.sync(str(tracker.spool), tracker.url, tracker.token) == {run.id: 3}  # init, points, finish
    assert _points(tracker, run.id, "loss")["total"] == 50


def test_offline_mode_only_spools_and_sync_uploads_everything(tracker):
    run = _init(tracker, mode="offline", tags=["offline"])
    for step in range(500):
        run.log({"loss": float(step)}, step=step)
    run.log_histogram("router/load/layer0", [1, 2, 3, 4], step=499)
    run.finish()
    assert httpx.get(f"{tracker.url}/api/runs").json()["total"] == 0  # nothing was sent
    assert run._spool.path.exists()
    sent = tracking.sync(str(tracker.spool), tracker.url, tracker.token)
    assert sent == {run.id: 3}  # init, one batch, finish
    assert _points(tracker, run.id, "loss")["total"] == 500
    assert httpx.get(f"{tracker.url}/api/runs/{run.id}").json()["status"] == "finished"
    assert tracking.sync(str(tracker.spool), tracker.url, tracker.token) == {}  # nothing left to send


def test_disabled_mode_is_a_no_op(tmp_path):
    run = tracking.init(project="t", mode="disabled", url="http://127.0.0.1:9", spool_dir=str(tmp_path / "s"))
    run.log({"loss": 1.0}, step=0)
    run.log_histogram("h", [1, 2])
    run.event("x", "y")
    run.finish()
    assert not (tmp_path / "s").exists()


def test_resume_by_run_id_appends_to_the_same_run(tracker):
    run = _init(tracker, name="resumable")
    run.log({"loss": 2.0}, step=0)
    run.finish(status="crashed")
    again = _init(tracker, id=run.id)
    again.log({"loss": 1.0}, step=1)
    again.finish()
    s = _points(tracker, run.id, "loss")
    assert s["steps"] == [0, 1] and s["values"] == [2.0, 1.0]
    info = httpx.get(f"{tracker.url}/api/runs/{run.id}").json()
    assert info["name"] == "resumable" and info["status"] == "finished"


def test_a_missing_token_spools_and_a_later_sync_with_the_token_delivers(tracker):
    run = _init(tracker, token="not-a-token")
    run.log({"loss": 1.0}, step=0)
    run.finish(timeout=0.5)
    assert run._spool.path.exists()
    assert tracking.sync(str(tracker.spool), tracker.url, tracker.token) == {run.id: 3}
    assert _points(tracker, run.id, "loss")["total"] == 1


def test_what_the_server_would_refuse_fails_in_the_caller_with_the_rule(tracker):
    run = _init(tracker)
    with pytest.raises(ValueError, match="metric key 'bad\\\\nkey' is not allowed"):
        run.log({"bad\nkey": 1.0}, step=0)
    with pytest.raises(ValueError, match="at most 65536 items"):
        run.log_histogram("too/long", list(range(70_000)), step=0)
    with pytest.raises(ValueError, match="message"):
        run.event("note", "x" * 70_000)
    with pytest.raises(ValueError, match="non-finite"):
        run.event("note", "nan in data", score=float("nan"))
    with pytest.raises(ValueError, match="lone surrogate"):
        run.event("note", "bad \ud800 text")
    with pytest.raises(TypeError, match="step must be an integer"):
        run.log({"loss": 1.0}, step=1.5)
    run.finish()
    with pytest.raises(ValueError, match="tags"):
        _init(tracker, tags=["x" * 65])
    with pytest.raises(ValueError, match="config"):
        _init(tracker, config={"lr": float("nan")})
    assert not run.refused and not run._spool.rejected_path.exists()


def test_names_and_tags_real_stages_use_are_stored(tracker):
    run = _init(tracker, project="moe ablation", name="label · oracle", tags=["oracle=heuristic (stand-in)"])
    run.log({"loss": 1.0}, step=0)
    run.finish()
    info = httpx.get(f"{tracker.url}/api/runs/{run.id}").json()
    assert info["project"] == "moe ablation" and info["tags"] == ["oracle=heuristic (stand-in)"]
    assert info["status"] == "finished" and _points(tracker, run.id, "loss")["total"] == 1


def test_an_item_over_the_body_limit_is_refused_alone_and_sync_delivers_it_to_a_bigger_server(tmp_path):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    token = store.create_token("test")
    small = ServerThread(lambda: create_app(store=store, max_body_bytes=48 * 1024)).start()
    try:
        run = tracking.init(project="t", url=small.url, token=token, spool_dir=str(tmp_path / "spool"),
                            flush_interval=30, retry_max_s=0.2)
        for step in range(1000):
            run.log({"loss": float(step)}, step=step)
        run.event("big", "y" * 60_000)  # valid, but its body alone is over this server's 48 KiB
        run.event("small", "fits")
        run.finish()
        assert httpx.get(f"{small.url}/api/runs/{run.id}/series", params={"key": "loss"}).json()["total"] == 1000
        kinds = [e["kind"] for e in httpx.get(f"{small.url}/api/runs/{run.id}/events").json()]
        assert kinds == ["small"]
        assert len(run.refused) == 1 and "413" in run.refused[0]["error"]
        assert run._spool.rejected_path.exists()
    finally:
        small.stop()
    big = ServerThread(lambda: create_app(store=store)).start()
    try:
        result = tracking.sync(str(tmp_path / "spool"), big.url, token)
        assert result.refused == [] and not run._spool.rejected_path.exists()
        kinds = sorted(e["kind"] for e in httpx.get(f"{big.url}/api/runs/{run.id}/events").json())
        assert kinds == ["big", "small"]
    finally:
        big.stop()
        store.engine.dispose()


def test_items_a_stricter_server_refuses_are_reported_kept_and_the_rest_lands(tracker, monkeypatch):
    from services.tracker import routes_data
    from services.tracker.validation import parse_batch

    def stricter(raw):  # a server that no longer takes events of kind "legacy"
        batch, refused = parse_batch(raw)
        keep = [e for e in batch.events if e.kind != "legacy"]
        refused += [{"item": f"events[{i}]", "error": "kind 'legacy' is retired"}
                    for i, e in enumerate(batch.events) if e.kind == "legacy"]
        return batch.model_copy(update={"events": keep}), refused

    monkeypatch.setattr(routes_data, "parse_batch", stricter)
    run = _init(tracker, flush_interval=30)
    run.log({"loss": 2.0}, step=0)
    run.event("legacy", "old")
    run.event("note", "new")
    run.finish()
    assert [e["kind"] for e in httpx.get(f"{tracker.url}/api/runs/{run.id}/events").json()] == ["note"]
    assert _points(tracker, run.id, "loss")["total"] == 1
    assert len(run.refused) == 1 and "retired" in run.refused[0]["error"]
    kept = run._spool.rejected_path.read_text()
    assert '"legacy"' in kept and '"note"' not in kept  # only the refused item is kept for a later sync
    monkeypatch.undo()
    result = tracking.sync(str(tracker.spool), tracker.url, tracker.token)
    assert result.refused == []
    assert sorted(e["kind"] for e in httpx.get(f"{tracker.url}/api/runs/{run.id}/events").json()) == ["legacy", "note"]


def test_sync_says_exactly_what_the_server_still_refuses_and_keeps_it(tracker):
    spool = tracker.spool
    spool.mkdir(parents=True)
    entry = {"error": "old", "op": {"op": "batch", "run": "nope", "body": {"batch_id": "b1", "metrics": {
        "loss": {"steps": [0], "walls": [1.0], "values": [1.0]}}}}}
    (spool / "nope.rejected.jsonl").write_text(json.dumps(entry) + "\n")
    result = tracking.sync(str(spool), tracker.url, tracker.token)
    assert len(result.refused) == 1 and "404" in result.refused[0]["error"]
    assert result.refused[0]["file"].endswith("nope.rejected.jsonl")
    assert (spool / "nope.rejected.jsonl").exists()  # still refused: kept, not dropped


def test_log_never_waits_for_the_network_and_checks_types(tmp_path, monkeypatch):
    import threading

    gate = threading.Event()
    sent = []

    def stuck_send(self, op):  # the network hangs until the test opens the gate
        gate.wait(30)
        sent.append(op["op"])

    monkeypatch.setattr(tracking._Transport, "send", stuck_send)
    run = tracking.init(project="t", url="http://127.0.0.1:9", spool_dir=str(tmp_path), flush_interval=0.01)
    for step in range(20_000):
        run.log({"loss": 1.0, "lr": 2.0}, step=step)
    assert not gate.is_set() and sent == []  # every log call returned while the sender was stuck
    with pytest.raises(TypeError, match="metric 'loss' must be a number"):
        run.log({"loss": "high"})
    gate.set()
    run.finish(timeout=10)
    assert sent[0] == "init" and sent[-1] == "finish"


def test_funnel_and_calibration_conventions(tracker):
    run = _init(tracker)
    run.log_funnel({"raw": 100, "lang": 80, "dedup": 50}, name="documents")
    run.log_calibration([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 4.0], name="helpfulness", bins=4)
    run.finish()
    events = httpx.get(f"{tracker.url}/api/runs/{run.id}/events").json()
    funnel = next(e for e in events if e["kind"] == "funnel")
    assert funnel["data"]["stages"] == [{"stage": "raw", "count": 100}, {"stage": "lang", "count": 80},
                                        {"stage": "dedup", "count": 50}]
    cal = next(e for e in events if e["kind"] == "calibration")
    assert cal["data"]["n"] == 4 and cal["data"]["ece"] == pytest.approx(0.25)


def test_artifact_records_path_and_sha256(tracker, tmp_path):
    import hashlib

    f = tmp_path / "ckpt.bin"
    f.write_bytes(b"weights")
    run = _init(tracker)
    digest = run.artifact(f, kind="checkpoint")
    run.finish()
    assert digest == hashlib.sha256(b"weights").hexdigest()
    art = httpx.get(f"{tracker.url}/api/runs/{run.id}/artifacts").json()[0]
    assert art["sha256"] == digest and art["size"] == 7 and art["kind"] == "checkpoint"


def test_a_large_buffer_is_sent_as_batches_under_the_point_limit(tracker, monkeypatch):
    import threading

    sizes = []
    gate = threading.Event()
    real_send = tracking._Transport.send

    def gated_send(self, op):  # the first request hangs while 5,000 points pile up in the buffer
        gate.wait(30)
        if op["op"] == "batch":
            sizes.append(sum(len(m["steps"]) for m in op["body"]["metrics"].values()))
        real_send(self, op)

    monkeypatch.setattr(tracking._Transport, "send", gated_send)
    run = _init(tracker, max_batch_points=1_000)
    for step in range(2_500):
        run.log({"a": 1.0, "b": 2.0}, step=step)
    gate.set()
    run.finish()
    assert sum(sizes) == 5_000 and max(sizes) <= 1_000 and len(sizes) >= 5
    assert _points(tracker, run.id, "a")["total"] == 2_500 and _points(tracker, run.id, "b")["total"] == 2_500


def test_event_data_may_use_the_names_kind_and_message(tracker):
    run = _init(tracker)
    run.event("router_health", "expert 3 dead", step=7, layer=2, kind="dead_expert", message="extra")
    run.finish()
    e = httpx.get(f"{tracker.url}/api/runs/{run.id}/events").json()[0]
    assert e["kind"] == "router_health" and e["message"] == "expert 3 dead" and e["step"] == 7
    assert e["data"] == {"layer": 2, "kind": "dead_expert", "message": "extra"}


def test_a_repeating_server_error_is_retried_a_few_times_then_kept_and_later_ops_still_land(tracker, monkeypatch):
    from services.tracker import routes_data

    def broken(raw):
        raise RuntimeError("a bug in the server")

    monkeypatch.setattr(routes_data, "parse_batch", broken)
    run = _init(tracker, flush_interval=30)
    run.log({"loss": 1.0}, step=0)
    t0 = time.time()
    run.finish(timeout=20)
    assert time.time() - t0 < 15, "a 500 must not be retried until the deadline"
    assert len(run.refused) == 1 and "HTTP 500" in run.refused[0]["error"]
    assert httpx.get(f"{tracker.url}/api/runs/{run.id}").json()["status"] == "finished"
    monkeypatch.undo()
    assert tracking.sync(str(tracker.spool), tracker.url, tracker.token).refused == []
    assert _points(tracker, run.id, "loss")["total"] == 1


def test_a_live_run_sends_heartbeats(tracker):
    run = _init(tracker, heartbeat_s=0.1)
    run.log({"loss": 1.0}, step=0)
    run.flush(10)
    first = httpx.get(f"{tracker.url}/api/runs/{run.id}").json()["last_seen"]
    time.sleep(0.6)
    assert httpx.get(f"{tracker.url}/api/runs/{run.id}").json()["last_seen"] > first
    run.finish()
