"""`moelab demo` (what `make demo` runs): the whole pipeline on the embedded defaults, as a Ray job.

It starts what a cluster would already have — a local Ray head and the tracker — then submits
`python -m cluster.pipeline configs/demo.yaml` with `ray job submit`, streams its progress, and
prints the summary and the dashboard URL. Both services are left running for the dashboard; a
second `moelab demo` reuses them, and the pipeline skips every stage that is already finished.
`moelab demo --stop` stops them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import typer

RAY_DASHBOARD = "http://127.0.0.1:8265"
RAY_TEMP = "/tmp/moelab-demo-ray"


def _bin(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else (shutil.which(name) or name)


def ray_env() -> dict[str, str]:
    """Token authentication with the demo's own token (Ray 2.60 turns token auth on by itself when
    ~/.ray/auth_token exists; an explicit token makes the head and every client agree either way)."""
    token = Path(RAY_TEMP) / "auth_token"
    if not token.is_file():
        import secrets

        token.parent.mkdir(parents=True, exist_ok=True)
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}


def _http_ok(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2.0).status_code < 500
    except httpx.HTTPError:
        return False


def free_port() -> int:
    """A TCP port nothing listens on now (the OS's pick for port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_ray(cpus: int) -> None:
    if _http_ok(f"{RAY_DASHBOARD}/api/version"):
        typer.echo(f"ray: using the running head at {RAY_DASHBOARD}")
        return
    typer.echo("ray: starting a local head (ray start --head)")
    # Its own temp dir: a plain `ray.init()` elsewhere (tests, notebooks) must not attach to the
    # demo's cluster, which it would through the default /tmp/ray/ray_current_cluster file. Its own
    # free ports for the GCS and the dashboard agent: another Ray on the machine holds the defaults
    # (6379, 52365), and an agent that cannot bind its port leaves the head up but unable to run a
    # job ("No available agent to submit job").
    subprocess.run([_bin("ray"), "start", "--head", f"--num-cpus={cpus}", "--include-dashboard=true",
                    "--dashboard-host=127.0.0.1", "--disable-usage-stats", f"--temp-dir={RAY_TEMP}",
                    f"--port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"],
                   check=True, stdout=subprocess.DEVNULL, env=ray_env())
    for _ in range(60):
        if _http_ok(f"{RAY_DASHBOARD}/api/version"):
            return
        time.sleep(1)
    raise RuntimeError("the Ray head started but its job server never answered on port 8265")


def ensure_tracker(root: Path, port: int) -> str:
    url = f"http://127.0.0.1:{port}"
    if _http_ok(f"{url}/healthz"):
        typer.echo(f"tracker: using the running server at {url}")
        return url
    logs = root / "runs"
    logs.mkdir(exist_ok=True)
    typer.echo(f"tracker: starting on {url} (log: runs/tracker.log)")
    with open(logs / "tracker.log", "ab") as log:
        subprocess.Popen([_bin("moelab"), "tracker", "serve", "--port", str(port)], cwd=root, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    for _ in range(60):
        if _http_ok(f"{url}/healthz"):
            return url
        time.sleep(0.5)
    raise RuntimeError(f"the tracker did not come up on {url}; see runs/tracker.log")


def _token(root: Path) -> str | None:
    from shared.config import load_config
    from shared.tracking import _resolve_token

    t = load_config(root / "configs" / "demo.yaml").tracker
    return _resolve_token(None, t.token_env, str(root / t.token_file))


def print_summary(summary: dict, tracker_url: str) -> None:
    docs, train = summary["documents"], summary["train"]
    typer.secho("\n== summary", bold=True)
    typer.echo(f"documents: raw {docs['raw']} → after filters+dedup {docs['after_filter']} → "
               f"kept by the scorer {docs['kept']} (keep rate {summary['keep_rate']:.0%})")
    for source, n in (summary.get("sources") or {}).items():
        typer.echo(f"  {source:>16}: {n['train']} train / {n['eval']} held-out documents")
    sc = summary.get("scorer") or {}
    if sc.get("held_out_spearman"):
        agreement = ", ".join(f"{n} {v:.2f}" for n, v in sc["held_out_spearman"].items() if v is not None)
        saved = f"{sc['flops_saved']:.0%}" if sc.get("flops_saved") is not None else "n/a"
        typer.echo(f"scorer: held-out Spearman vs the oracle (Judge) {agreement}; early exit saved {saved} of "
                   f"backbone FLOPs on the held-out split")
    tokens = summary.get("tokens") or {}
    if tokens.get("tokens"):
        typer.echo(f"tokens: {tokens['tokens']:,} in the shards ({tokens.get('docs', 0):,} documents)")
    mfu = f"{train['mfu']:.2%}" if train.get("mfu") is not None else "n/a"
    typer.echo(f"train: {train['steps']} steps, loss {train['loss']:.3f}, eval loss {train.get('eval/loss', float('nan')):.3f}, "
               f"{train['tokens_per_s']:,.0f} tokens/s, MFU {mfu}")
    for name, st in summary["stages"].items():
        typer.echo(f"  stage {name:>9}: {'skipped' if st['skipped'] else str(st['seconds']) + ' s'}")
    typer.secho(f"dashboard: {tracker_url}/", bold=True)


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        config: str = typer.Option("configs/demo.yaml", "--config", help="Pipeline config to submit."),
        port: int = typer.Option(8000, "--port", help="Tracker port."),
        cpus: int = typer.Option(2, "--cpus", help="CPUs for the local Ray head."),
        stop: bool = typer.Option(False, "--stop", help="Stop the local Ray head and tracker the demo started."),
    ) -> None:
        """Run the whole data-to-model pipeline on the demo corpus as a `ray job submit`."""
        root = Path.cwd()
        if stop:
            subprocess.run([_bin("ray"), "stop"], check=False, env={**ray_env(), "RAY_TMPDIR": RAY_TEMP})
            subprocess.run(["pkill", "-f", "moelab tracker serve"], check=False)
            return
        ensure_ray(cpus)
        tracker_url = ensure_tracker(root, port)
        env = {"MOELAB_TRACKER_TOKEN": _token(root) or "", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        runs = root / "runs"
        cmd = [_bin("ray"), "job", "submit", "--address", RAY_DASHBOARD, "--working-dir", str(root),
               "--runtime-env-json", json.dumps({"env_vars": env}), "--",
               sys.executable, "-m", "cluster.pipeline", config, f"train.out_dir={runs}",
               f"tracker.url={tracker_url}", f"tracker.spool_dir={runs / 'spool'}"]
        typer.echo("submitting: " + " ".join(cmd[:6]) + " … -- python -m cluster.pipeline " + config)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**ray_env(), "RAY_ADDRESS": RAY_DASHBOARD})
        last_json = None
        for line in proc.stdout:
            sys.stdout.write(line)
            if line.startswith("{") and '"documents"' in line:
                last_json = line
        if proc.wait() != 0 or last_json is None:
            typer.secho("the pipeline job failed (see the log above)", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)
        print_summary(json.loads(last_json), tracker_url)
