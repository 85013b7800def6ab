"""`moelab tracker token|sync` (serve is exercised by benchmarks/tracker.py and its slow test)."""

from __future__ import annotations

from typer.testing import CliRunner

from moelab.cli import app
from shared import tracking


def test_token_command_creates_a_working_token_and_can_save_it(tmp_path, monkeypatch):
    from services.tracker.store import Store

    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path}/t.db"
    out = CliRunner().invoke(app, ["tracker", "token", "--db", db, "--name", "ci", "--save"])
    assert out.exit_code == 0, out.output
    token = out.output.strip().splitlines()[-1]
    assert Store(db).token_valid(token) and not Store(db).token_valid(token + "x")
    saved = tmp_path / "runs" / "tracker.token"
    assert saved.read_text().strip() == token and (saved.stat().st_mode & 0o777) == 0o600


def test_sync_uploads_offline_runs_and_fails_clearly_without_a_server(server, tmp_path):
    spool = tmp_path / "spool"
    run = tracking.init(project="cli", mode="offline", spool_dir=str(spool), url=server.url)
    run.log({"loss": 1.0}, step=0)
    run.finish()
    down = CliRunner().invoke(app, ["tracker", "sync", "--spool-dir", str(spool), "--url", "http://127.0.0.1:9",
                                    "--token", server.token])
    assert down.exit_code == 1 and "cannot reach the tracker" in down.output
    ok = CliRunner().invoke(app, ["tracker", "sync", "--spool-dir", str(spool), "--url", server.url, "--token", server.token])
    assert ok.exit_code == 0 and "synced 1 runs" in ok.output
    assert server.store.get_run(run.id)["status"] == "finished"
