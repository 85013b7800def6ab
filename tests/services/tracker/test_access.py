"""Who may do what: token scopes, revocation, read-protected pages, browser sessions, Host allow-list."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from services.tracker.app import create_app
from services.tracker.store import Store
from shared.net import free_port

LOCAL = "http://127.0.0.1"
ROOT = Path(__file__).resolve().parents[3]


def _bearer(token):
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    yield s
    s.engine.dispose()


def test_a_read_token_cannot_write_or_delete_and_a_write_token_cannot_delete(store):
    client = TestClient(create_app(store=store), base_url=LOCAL)
    read, write, admin = (store.create_token(s, scope=s) for s in ("read", "write", "admin"))
    assert client.post("/api/runs", json={"id": "r1"}, headers=_bearer(read)).status_code == 403
    assert client.post("/api/runs", json={"id": "r1"}, headers=_bearer(write)).status_code == 201
    batch = {"batch_id": "b", "metrics": {"loss": {"steps": [0], "walls": [1.0], "values": [1.0]}}}
    assert client.post("/api/runs/r1/batch", json=batch, headers=_bearer(read)).status_code == 403
    assert client.post("/api/runs/r1/finish", json={}, headers=_bearer(read)).status_code == 403
    assert client.post("/api/runs/r1/heartbeat", headers=_bearer(read)).status_code == 403
    r = client.delete("/api/runs/r1", headers=_bearer(read))
    assert r.status_code == 403 and "needs scope admin" in r.text
    assert client.delete("/api/runs/r1", headers=_bearer(write)).status_code == 403
    assert client.get("/api/runs/r1").status_code == 200
    assert client.delete("/api/runs/r1", headers=_bearer(admin)).status_code == 200
    assert client.get("/api/runs/r1").status_code == 404


def test_a_revoked_token_stops_working_and_the_list_never_shows_token_values(store):
    client = TestClient(create_app(store=store), base_url=LOCAL)
    token = store.create_token("ci", scope="write")
    assert client.post("/api/runs", json={"id": "r1"}, headers=_bearer(token)).status_code == 201
    assert store.revoke_tokens("ci") == 1
    assert client.post("/api/runs", json={"id": "r2"}, headers=_bearer(token)).status_code == 403
    listed = store.list_tokens()
    assert listed[0]["revoked"] and token not in repr(listed)


def test_read_protected_pages_and_api_leak_nothing_without_a_token(store):
    write = store.create_token("w")
    client = TestClient(create_app(store=store, read_protected=True), base_url=LOCAL)
    client.post("/api/runs", json={"id": "secret1", "name": "top-secret-ablation"}, headers=_bearer(write))
    for path in ("/", "/runs/secret1", "/compare?runs=secret1", "/runs/nope"):
        r = client.get(path)
        assert r.status_code == 401 and "top-secret-ablation" not in r.text and "secret1" not in r.text, path
        assert "login" in r.text
    for path in ("/api/runs", "/api/runs/secret1", "/api/runs/secret1/keys", "/api/projects", "/api/compare?runs=secret1&key=x",
                 "/api/runs/secret1/children"):
        assert client.get(path).status_code == 401, path
    # a token in the URL is not a credential
    assert client.get(f"/api/runs?token={write}").status_code == 401
    assert client.get(f"/runs/secret1?token={write}").status_code == 401
    assert client.get("/api/runs", headers=_bearer(write)).status_code == 200


def test_a_login_opens_a_read_only_session_cookie_that_dies_with_its_token(store):
    read = store.create_token("reader", scope="read")
    client = TestClient(create_app(store=store, read_protected=True), base_url=LOCAL)
    assert client.post("/api/session", json={"token": "wrong"}).status_code == 403
    r = client.post("/api/session", json={"token": read})
    assert r.status_code == 200
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and read.lower() not in cookie
    assert client.get("/api/runs").status_code == 200 and client.get("/").status_code == 200
    assert client.post("/api/runs", json={"id": "x"}).status_code == 401  # a session never writes
    store.revoke_tokens(read)
    assert client.get("/api/runs").status_code == 401
    client.delete("/api/session")


def test_requests_for_a_host_not_allowed_are_refused(store):
    app = create_app(store=store)
    assert TestClient(app, base_url="http://127.0.0.1:8000").get("/healthz").status_code == 200
    assert TestClient(app, base_url="http://localhost").get("/api/runs").status_code == 200
    assert TestClient(app, base_url="http://[::1]:8000").get("/api/runs").status_code == 200
    rebound = TestClient(app, base_url="http://attacker.example").get("/api/runs")
    assert rebound.status_code == 400 and "allowed-host" in rebound.text
    team = create_app(store=store, allowed_hosts=["*.lab.internal"])
    assert TestClient(team, base_url="http://tracker.lab.internal").get("/healthz").status_code == 200
    assert TestClient(team, base_url="http://lab.internal.evil").get("/healthz").status_code == 400
    assert TestClient(create_app(store=store, allowed_hosts=["*"]), base_url="http://anything").get("/healthz").status_code == 200


def test_the_first_serve_writes_its_token_only_to_an_owner_only_file(tmp_path):
    port = free_port()
    db = f"sqlite:///{tmp_path}/t.db"
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moelab.cli", "tracker", "serve", "--db", db, "--port", str(port)],
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token_file = tmp_path / "runs" / "tracker.token"
        token = token_file.read_text().strip()
        assert token.startswith("mlt_") and (token_file.stat().st_mode & 0o777) == 0o600
        assert token not in log.read_text() and "tracker.token" in log.read_text()
        assert Store(db).token_scope(token) == "write"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_cached_write_token_is_checked_without_the_database_and_revocation_still_bites(store, monkeypatch):
    """Write requests are checked from the scope cache in the event loop (no worker thread); the
    database is asked when the cache does not know the token, and a revocation empties the cache."""
    client = TestClient(create_app(store=store), base_url=LOCAL)
    token = store.create_token("w", scope="write")
    assert store.cached_token_scope(token) is None  # never checked yet
    assert client.post("/api/runs", json={"id": "r1"}, headers=_bearer(token)).status_code == 201
    assert store.cached_token_scope(token) == "write"
    asked = []
    real = store.token_scope
    monkeypatch.setattr(store, "token_scope", lambda t: asked.append(t) or real(t))
    batch = {"batch_id": "b", "metrics": {"loss": {"steps": [0], "walls": [1.0], "values": [1.0]}}}
    assert client.post("/api/runs/r1/batch", json=batch, headers=_bearer(token)).status_code == 200
    assert asked == []
    store.revoke_tokens("w")
    assert store.cached_token_scope(token) is None
    assert client.post("/api/runs/r1/finish", json={"status": "finished"}, headers=_bearer(token)).status_code == 403
    assert asked == [token]
