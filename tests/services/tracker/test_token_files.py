"""Two trackers started from one folder keep their own first tokens: the second never overwrites
the token file the first one's clients read."""

from __future__ import annotations

from typer.testing import CliRunner

from moelab.cli import app
from shared import tracking
from shared.tracking.api import server_token_file


def _serve(monkeypatch, db: str, port: int) -> str:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)  # the store and token files, without blocking
    out = CliRunner().invoke(app, ["tracker", "serve", "--db", db, "--port", str(port)])
    assert out.exit_code == 0, out.output
    return out.output


def test_a_second_tracker_keeps_the_first_trackers_token_file_and_clients_of_each_find_their_own(tmp_path, monkeypatch):
    from services.tracker.store import Store

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MOELAB_TRACKER_TOKEN", raising=False)
    db_a, db_b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    _serve(monkeypatch, db_a, 8000)
    shared_file = tmp_path / "runs" / "tracker.token"
    token_a = shared_file.read_text().strip()
    said = _serve(monkeypatch, db_b, 8001)
    assert shared_file.read_text().strip() == token_a  # not clobbered
    assert "left as it is" in said and "tracker.8001.token" in said
    token_b = (tmp_path / "runs" / "tracker.8001.token").read_text().strip()
    assert (tmp_path / "runs" / "tracker.8001.token").stat().st_mode & 0o777 == 0o600
    assert Store(db_a).token_valid(token_a) and Store(db_b).token_valid(token_b)
    # each client finds the token of the server it reports to
    file = "runs/tracker.token"
    assert tracking.resolve_token(None, "MOELAB_TRACKER_TOKEN", file, "http://127.0.0.1:8000") == token_a
    assert tracking.resolve_token(None, "MOELAB_TRACKER_TOKEN", file, "http://127.0.0.1:8001") == token_b
    assert tracking.resolve_token(None, "MOELAB_TRACKER_TOKEN", file, "http://127.0.0.1:8002") == token_a
    assert tracking.resolve_token(None, "MOELAB_TRACKER_TOKEN", file) == token_a


def test_a_restarted_tracker_with_tokens_writes_no_token_file(tmp_path, monkeypatch):
    from services.tracker.store import Store

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path}/a.db"
    Store(db).create_token("someone")
    said = _serve(monkeypatch, db, 8005)
    assert "created the first API token" not in said
    assert not (tmp_path / "runs" / "tracker.token").exists() and not server_token_file("runs/tracker.token", 8005).exists()


def test_token_file_of_a_port_sits_beside_the_shared_one():
    assert str(server_token_file("runs/tracker.token", 8001)) == "runs/tracker.8001.token"
    assert str(server_token_file("/x/tok", 9)) == "/x/tok.9"
