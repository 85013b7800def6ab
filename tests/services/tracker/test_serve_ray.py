"""The tracker app deploys unchanged as a Ray Serve application (the cluster deployment path)."""

from __future__ import annotations

import time

import httpx
import pytest

from shared.net import free_port

# checked before the ray_local fixture starts Ray, so a machine without Serve skips in milliseconds
pytest.importorskip("grpc_reflection", reason="Ray Serve needs its extra: pip install 'ray[serve]>=2.60,<3'")


@pytest.mark.slow
def test_tracker_runs_as_a_ray_serve_app(ray_local, tmp_path):
    from ray import serve

    from services.tracker.serve_ray import build_deployment
    from services.tracker.store import Store

    db = f"sqlite:///{tmp_path}/tracker.db"
    token = Store(db).create_token()
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_deployment(db, num_cpus=0.25), name="tracker", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        h = {"authorization": f"Bearer {token}"}
        assert httpx.post(url + "/api/runs", json={"id": "serve1", "name": "on-ray"}, headers=h).status_code == 201
        assert httpx.post(url + "/api/runs", json={"id": "serve2"}).status_code == 401
        assert httpx.get(url + "/api/runs/serve1").json()["name"] == "on-ray"
    finally:
        serve.shutdown()
