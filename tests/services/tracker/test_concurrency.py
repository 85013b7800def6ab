"""Eight clients writing at once (8 × 10,000 points) all land, on SQLite (WAL) and on PostgreSQL."""

from __future__ import annotations

import threading

import httpx

from shared import tracking
from tests.services.tracker.helpers import ServerThread


def test_eight_concurrent_writers_times_ten_thousand_points_all_land(db_url, tmp_path):
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(db_url)
    token = store.create_token()
    srv = ServerThread(lambda: create_app(store=store)).start()
    try:
        runs = [tracking.init(project="load", url=srv.url, token=token, spool_dir=str(tmp_path / "spool"),
                              flush_interval=0.01, max_batch_points=2_000, name=f"writer{i}") for i in range(8)]
        # writers 0-3 also share one run and key, so appends to the same series race
        shared = tracking.init(project="load", url=srv.url, token=token, spool_dir=str(tmp_path / "spool"),
                               flush_interval=0.01, max_batch_points=2_000, name="shared")
        shared_writers = [tracking.init(project="load", id=shared.id, url=srv.url, token=token,
                                        spool_dir=str(tmp_path / f"spool{i}"), flush_interval=0.01,
                                        max_batch_points=2_000) for i in range(4)]

        def write(i):
            for step in range(5_000):
                runs[i].log({"loss": step * 0.001, f"w{i}/tokens_per_s": float(i)}, step=step)
            if i < 4:
                for step in range(2_500):
                    shared_writers[i].log({"loss": float(i)}, step=i * 2_500 + step)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in runs + shared_writers:
            r.finish(timeout=60)
        shared.finish()
        for i, r in enumerate(runs):
            assert r.points_logged == 10_000
            for key in ("loss", f"w{i}/tokens_per_s"):
                s = httpx.get(f"{srv.url}/api/runs/{r.id}/series", params={"key": key, "points": 10_000}).json()
                assert s["total"] == 5_000 and s["steps"] == list(range(5_000)), (i, key)
        s = httpx.get(f"{srv.url}/api/runs/{shared.id}/series", params={"key": "loss", "points": 10_000}).json()
        assert s["total"] == 10_000 and s["steps"] == list(range(10_000))
        assert not list((tmp_path).rglob("*.jsonl")), "nothing may be left in a spool"
    finally:
        srv.stop()
        store.engine.dispose()
