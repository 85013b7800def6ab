"""`moelab tracker serve|token|sync`: run the tracker service, manage API tokens, upload spooled runs."""

from __future__ import annotations

import os
import socket
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


def write_first_token(store, token_file: str, port: int) -> list[Path]:
    """Give a store without tokens its first write token, in this server's own token file
    (`server_token_file`, keyed by port), and in the shared `token_file` only if that file does not
    exist yet: a second tracker started in the same folder never clobbers the first one's token,
    so the first's clients keep working. Returns the files written."""
    from shared.tracking.api import server_token_file

    token = store.create_token("first", scope="write")
    written = [server_token_file(token_file, port)]
    if not Path(token_file).exists():
        written.append(Path(token_file))
    for path in written:
        _write_token_file(str(path), token)
    return written


def served_hosts(configured: list[str], extra: list[str], interface: str) -> list[str]:
    """Host names the server answers: the configured ones, `--allowed-host`s, the interface it
    binds to, and this machine's names when it binds every interface (team members use those)."""
    hosts = [*configured, *extra]
    if interface in ("0.0.0.0", "::", ""):
        hosts += [socket.gethostname(), socket.getfqdn()]
    else:
        hosts.append(interface)
    return sorted(set(hosts))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The experiment tracker: dashboard + REST API, tokens, offline sync.", no_args_is_help=True)

    @group.command("serve")
    def serve(
        db: str | None = DB_OPT,
        port: int | None = typer.Option(None, "--port", help="Port to listen on (default: tracker.port, 8000)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface; 0.0.0.0 serves a team."),
        config: str | None = CONFIG_OPT,
        read_protected: bool | None = typer.Option(None, "--read-protected/--open-reads",
                                                   help="Require a token (or a dashboard login) for reads and pages."),
        allowed_host: list[str] = typer.Option([], "--allowed-host",
                                               help="Another Host name to answer (repeatable; '*' for any)."),
    ) -> None:
        """Serve the dashboard and API. Makes a first write token (in tracker.token_file) if the store has none."""
        import uvicorn

        from services.tracker.app import create_app
        from services.tracker.store import Store

        tcfg = load_or_exit(config, []).tracker
        store = Store(db or tcfg.db_url, crash_after_s=tcfg.crash_after_s)
        port = port or tcfg.port
        if store.count_tokens() == 0:
            written = write_first_token(store, tcfg.token_file, port)
            kept = "" if len(written) > 1 else f"; {tcfg.token_file} holds another tracker's token and is left as it is"
            typer.echo(f"created the first API token (scope write) in {', '.join(map(str, written))} (mode 0600); "
                       f"local clients of port {port} read it from there{kept}")
        protected = tcfg.read_protected if read_protected is None else read_protected
        hosts = served_hosts(tcfg.allowed_hosts, allowed_host, host)
        api = create_app(store=store, read_protected=protected, max_body_bytes=int(tcfg.max_body_mb * 1024 * 1024),
                         allowed_hosts=hosts)
        typer.echo(f"moelab tracker on http://{host}:{port} (store: {store.url}; "
                   f"answers Host {', '.join(hosts)}{'; reads need a token' if protected else ''})")
        uvicorn.run(api, host=host, port=port, log_level="warning")

    @group.command("token")
    def token(
        db: str | None = DB_OPT,
        name: str = typer.Option("default", "--name", help="A label for the token (who or what uses it)."),
        scope: str = typer.Option("write", "--scope", help="read (dashboard, API reads), write (+ ingest) or admin "
                                                           "(+ delete runs)."),
        config: str | None = CONFIG_OPT,
        save: bool = typer.Option(False, "--save", help="Also write it to tracker.token_file for local clients."),
        revoke: str | None = typer.Option(None, "--revoke", help="Revoke tokens by id, by name, or the token itself."),
        list_: bool = typer.Option(False, "--list", help="List tokens (id, name, scope, state); never their values."),
    ) -> None:
        """Create an API token and print it (the store keeps only its SHA-256), or list/revoke tokens."""
        from services.tracker.store import SCOPES, Store

        tcfg = load_or_exit(config, []).tracker
        store = Store(db or tcfg.db_url)
        if list_:
            for t in store.list_tokens():
                typer.echo(f"{t['id']:>4}  {t['name']:<24} {t['scope']:<6} {'revoked' if t['revoked'] else 'active'}")
            return
        if revoke is not None:
            n = store.revoke_tokens(revoke)
            if n == 0:
                typer.secho(f"no active token matches {revoke!r} (by id, name or value)", fg=typer.colors.RED, err=True)
                raise typer.Exit(code=1)
            typer.echo(f"revoked {n} token(s); servers stop accepting them within a few seconds")
            return
        if scope not in SCOPES:
            typer.secho(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        tok = store.create_token(name, scope=scope)
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
        """Upload runs spooled offline or while the server was down, and offer refused ops again.

        Exits 1 if the server is unreachable, 2 if it still refuses something (each listed, kept)."""
        from shared import tracking

        tcfg = load_or_exit(config, []).tracker
        tok = tracking.resolve_token(token, tcfg.token_env, tcfg.token_file, url or tcfg.url)
        try:
            sent = tracking.sync(spool_dir or tcfg.spool_dir, url or tcfg.url, tok)
        except ConnectionError as exc:
            typer.secho(str(exc), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None
        for run_id, n in sent.items():
            typer.echo(f"{run_id}: {n} batches uploaded")
        typer.echo(f"synced {len(sent)} runs")
        for r in sent.refused:
            op = r.get("op", {})
            typer.secho(f"still refused: {op.get('op', '?')} of run {op.get('run', '?')}: {r['error'][:300]} "
                        f"(kept in {r['file']})", fg=typer.colors.RED, err=True)
        if sent.refused:
            raise typer.Exit(code=2)

    app.add_typer(group, name="tracker")
