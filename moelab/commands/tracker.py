"""`moelab tracker serve|token|sync`: run the tracker service, mint API tokens, upload spooled runs."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from moelab.commands.common import load_or_exit

CONFIG_OPT = typer.Option(None, "--config", "-c", help="YAML recipe whose `tracker` section gives the defaults.")
DB_OPT = typer.Option(None, "--db", help="SQLAlchemy URL: sqlite:///runs/tracker.db (default) or postgresql+psycopg://…")


def _write_token_file(path: str, token: str) -> None:
    """Atomically write the token readable by its owner only (the client falls back to this file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, p)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The experiment tracker: dashboard + REST API, tokens, offline sync.", no_args_is_help=True)

    @group.command("serve")
    def serve(
        db: str | None = DB_OPT,
        port: int | None = typer.Option(None, "--port", help="Port to listen on (default: tracker.port, 8000)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface; 0.0.0.0 serves a team."),
        config: str | None = CONFIG_OPT,
        read_protected: bool | None = typer.Option(None, "--read-protected/--open-reads", help="Require a token for reads."),
    ) -> None:
        """Serve the dashboard and API. Makes a first token (in tracker.token_file) if the store has none."""
        import uvicorn

        from services.tracker.app import create_app
        from services.tracker.store import Store

        tcfg = load_or_exit(config, []).tracker
        store = Store(db or tcfg.db_url)
        if store.count_tokens() == 0:
            token = store.create_token("first")
            _write_token_file(tcfg.token_file, token)
            typer.echo(f"created the first API token; clients read it from {tcfg.token_file} "
                       f"(or set {tcfg.token_env}={token})")
        protected = tcfg.read_protected if read_protected is None else read_protected
        api = create_app(store=store, read_protected=protected, max_body_bytes=int(tcfg.max_body_mb * 1024 * 1024))
        typer.echo(f"moelab tracker on http://{host}:{port or tcfg.port} (store: {store.url})")
        uvicorn.run(api, host=host, port=port or tcfg.port, log_level="warning")

    @group.command("token")
    def token(
        db: str | None = DB_OPT,
        name: str = typer.Option("default", "--name", help="A label for the token (who or what uses it)."),
        config: str | None = CONFIG_OPT,
        save: bool = typer.Option(False, "--save", help="Also write it to tracker.token_file for local clients."),
    ) -> None:
        """Create an API token for writes and print it (the store keeps only its SHA-256)."""
        from services.tracker.store import Store

        tcfg = load_or_exit(config, []).tracker
        tok = Store(db or tcfg.db_url).create_token(name)
        if save:
            _write_token_file(tcfg.token_file, tok)
        typer.echo(tok)

    @group.command("sync")
    def sync(
        spool_dir: str | None = typer.Option(None, "--spool-dir", help="Spool folder (default: tracker.spool_dir)."),
        url: str | None = typer.Option(None, "--url", help="Tracker URL (default: tracker.url)."),
        token: str | None = typer.Option(None, "--token", help="API token (default: env var or token file)."),
        config: str | None = CONFIG_OPT,
    ) -> None:
        """Upload runs spooled offline or while the server was down; exits 1 if the server is unreachable."""
        from shared import tracking

        tcfg = load_or_exit(config, []).tracker
        tok = tracking._resolve_token(token, tcfg.token_env, tcfg.token_file)
        try:
            sent = tracking.sync(spool_dir or tcfg.spool_dir, url or tcfg.url, tok)
        except ConnectionError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None
        for run_id, n in sent.items():
            typer.echo(f"{run_id}: {n} batches uploaded")
        typer.echo(f"synced {len(sent)} runs")

    app.add_typer(group, name="tracker")
