"""Run lifecycle on a live server: heartbeats, crash detection after SIGKILL, lineage of pipeline stages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from shared import tracking
from tests.services.tracker.helpers import ServerThread

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from shared import tracking
run = tracking.init(project="t", name="doomed", url={url!r}, token={token!r}, spool_dir={spool!r},
                    flush_interval=0.05, heartbeat_s=0.2)
run.log({{"loss": 1.0}}, step=0)
run.flush(10)
print(run.id, flush=True)
time.sleep(600)
"""


@pytest.fixture
def live(tmp_path):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{tmp_path}/tracker.db")
    srv = ServerThread(lambda: create_app(store=store, crash_after_s=1.5)).start()
    srv.token, srv.store, srv.spool = store.create_token("t"), store, str(tmp_path / "spool")
    yield srv
    srv.stop()
    store.engine.dispose()


def _status(srv, run_id):
    return httpx.get(f"{srv.url}/api/runs/{run_id}").json()


def test_a_sigkilled_run_becomes_crashed_while_a_live_quiet_run_stays_running(live):
    code = CHILD.format(root=str(ROOT), url=live.url, token=live.token, spool=live.spool)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        doomed = proc.stdout.readline().strip()
        quiet = tracking.init(project="t", name="quiet", url=live.url, token=live.token, spool_dir=live.spool,
                              flush_interval=0.05, heartbeat_s=0.2)
        quiet.log({"loss": 1.0}, step=0)
        assert _status(live, doomed)["status"] == "running"
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.time()
        deadline = killed_at + 15
        while _status(live, doomed)["status"] == "running" and time.time() < deadline:
            time.sleep(0.2)
        info = _status(live, doomed)
        assert info["status"] == "crashed"
        assert info["finished"] <= killed_at + 0.5  # ends at its last sign of life, not at detection
        assert _status(live, quiet.id)["status"] == "running"  # heartbeats keep a silent run alive
        quiet.finish()
        assert _status(live, quiet.id)["status"] == "finished"
    finally:
        proc.kill()
        proc.wait(10)


def test_a_heartbeat_revives_a_run_marked_crashed_during_a_partition(live):
    h = {"authorization": f"Bearer {live.token}"}
    httpx.post(f"{live.url}/api/runs", json={"id": "p1"}, headers=h).raise_for_status()
    time.sleep(1.8)
    assert _status(live, "p1")["status"] == "crashed"
    assert httpx.post(f"{live.url}/api/runs/p1/heartbeat", headers=h).json()["status"] == "running"
    assert _status(live, "p1")["status"] == "running" and _status(live, "p1")["finished"] is None


def test_children_lists_stage_runs_in_order_with_figures_and_their_detail_runs(live):
    common = dict(url=live.url, token=live.token, spool_dir=live.spool, flush_interval=0.05)
    pipe = tracking.init(project="t", name="pipe", tags=["pipeline"], **common)
    ids = []
    for stage in ("filter", "label", "train"):
        s = tracking.init(project="t", name=f"demo-{stage}", tags=["stage", stage], parent=pipe.id, **common)
        if stage == "filter":
            detail = tracking.init(project="t", name="demo-data-filter", parent=s.id, **common)
            detail.finish()
        time.sleep(0.3)
        s.log({"records": 240, "written": 173, "rubrics/general/n": 16, "seconds": 0.3}, step=0)
        s.log({"curve": 1.0}, step=0)
        s.log({"curve": 0.5}, step=1)  # a series, not a figure
        s.finish()
        ids.append(s.id)
    pipe.finish()
    kids = httpx.get(f"{live.url}/api/runs/{pipe.id}/children").json()
    assert [k["id"] for k in kids] == ids
    assert list(kids[0]["figures"]) == ["records", "seconds", "written", "rubrics/general/n"]  # top level first
    assert [c["name"] for c in kids[0]["children"]] == ["demo-data-filter"]
    assert all(k["finished"] - k["created"] >= 0.3 for k in kids), "a stage run lasts as long as its stage"
    assert httpx.get(f"{live.url}/api/runs", params={"parent": pipe.id}).json()["total"] == 3
