"""`moelab demo` (what `make demo` runs): the whole pipeline on the embedded defaults, as a Ray job.

It starts what a cluster would already have — a local Ray head and the tracker — then submits
`python -m cluster.pipeline configs/demo.yaml` with `ray job submit`, streams its progress, and
prints the summary and the dashboard URL. Both services are left running for the dashboard; a
second `moelab demo` reuses them, and the pipeline skips every stage that is already finished.
`moelab demo --stop` stops the ones this demo started, and nothing else: they are recorded in
`runs/demo-processes.json` by pid and start time (demo_processes.py); a Ray head or tracker the
demo found already running is used and left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from moelab.commands.demo_processes import RECORD_FILE, start_recorded, stop_recorded
from moelab.commands.demo_router import demo_run_folder, measure_frozen_router
from moelab.commands.demo_transcript import DemoTranscript
from shared.net import free_port


@dataclass(frozen=True)
class RayHead:
    """The demo's local Ray head: its own temp dir, so that a plain `ray.init()` elsewhere (tests,
    notebooks) does not attach to it through the default /tmp/ray/ray_current_cluster file, and,
    besides the dashboard's 8265 (the address jobs are submitted to), ports nothing else holds when
    it starts (None: a free one). Another Ray on the machine keeps Ray's defaults (GCS 6379, agent
    52365, client 10001), and an agent that cannot bind its port leaves the head up but unable to
    run a job ("No available agent to submit job")."""

    temp_dir: str = "/tmp/moelab-demo-ray"
    dashboard_port: int = 8265
    gcs_port: int | None = None
    agent_port: int | None = None
    client_port: int | None = None

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start_argv(self, ray: str, cpus: int) -> list[str]:
        """`ray start --head --block`: the command stays the parent of every head process (and ends
        them when it gets SIGTERM), which is what lets `--stop` find exactly this head."""
        gcs, agent, client = (port or free_port() for port in (self.gcs_port, self.agent_port, self.client_port))
        return [ray, "start", "--head", "--block", f"--num-cpus={cpus}", "--include-dashboard=true",
                "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}", f"--port={gcs}",
                f"--dashboard-agent-listen-port={agent}", f"--ray-client-server-port={client}",
                "--disable-usage-stats", f"--temp-dir={self.temp_dir}"]


DEMO_HEAD = RayHead()
# SIGTERM to SIGKILL: longer than the 30 s a Ray node drains before it shuts its processes down itself
STOP_GRACE_S = 45.0


def _bin(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    return str(local) if local.exists() else (shutil.which(name) or name)


def ray_env(head: RayHead = DEMO_HEAD) -> dict[str, str]:
    """Token authentication with the demo's own token (Ray 2.60 turns token auth on by itself when
    ~/.ray/auth_token exists; an explicit token makes the head and every client agree either way)."""
    token = Path(head.temp_dir) / "auth_token"
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


def ensure_ray(root: Path, cpus: int, head: RayHead = DEMO_HEAD) -> None:
    """Use the head answering at `head.dashboard`, or start one and wait until it is fully up: its
    dashboard answers before the raylet has joined, and a head stopped then drains for Ray's full
    30 s. `ray start` writes `<temp dir>/ray_current_cluster` once the node has started."""
    if _http_ok(f"{head.dashboard}/api/version"):
        typer.echo(f"ray: using the running head at {head.dashboard}")
        return
    started = Path(head.temp_dir) / "ray_current_cluster"
    started.unlink(missing_ok=True)  # an earlier head's (no head answers): it would read as this one's
    logs = root / "runs"
    logs.mkdir(exist_ok=True)
    typer.echo("ray: starting a local head (ray start --head; log: runs/ray-head.log)")
    with open(logs / "ray-head.log", "ab") as log:
        proc = start_recorded(root / RECORD_FILE, "ray-head", head.start_argv(_bin("ray"), cpus), stdout=log,
                              stderr=subprocess.STDOUT, env=ray_env(head))
    for _ in range(240):
        if started.is_file() and _http_ok(f"{head.dashboard}/api/version"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with code {proc.returncode}; see runs/ray-head.log")
        time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not come up within 120 s (dashboard {head.dashboard}); see runs/ray-head.log")


TRACKER_PORTS_TRIED = 10
_NO_SUCH_RUN = "demo-write-probe"


def _takes_writes(url: str, token: str | None) -> bool:
    """Whether the tracker at `url` accepts writes with `token`. A heartbeat for a run that does not
    exist answers 404 once the token passes and 401/403 when it does not; nothing is written."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        status = httpx.post(f"{url}/api/runs/{_NO_SUCH_RUN}/heartbeat", headers=headers, timeout=2.0).status_code
    except httpx.HTTPError:
        return False
    return status not in (401, 403)


def ensure_tracker(root: Path, port: int) -> str:
    """Use the tracker on `port` when it takes this checkout's token, or start this checkout's own.

    A tracker that another checkout started answers on the same port with its own token store: the
    demo's runs would be refused (401), spooled, and missing from the dashboard the summary points
    at. Such a server is left alone and the next free port is used instead."""
    for candidate in range(port, port + TRACKER_PORTS_TRIED):
        url = f"http://127.0.0.1:{candidate}"
        if not _http_ok(f"{url}/healthz"):
            return _start_tracker(root, candidate)
        if _takes_writes(url, _token(root)):
            typer.echo(f"tracker: using the running server at {url}")
            return url
        typer.echo(f"tracker: the server at {url} does not accept this checkout's token ({_token_file(root)}): "
                   "started from another checkout? Leaving it alone.")
    raise RuntimeError(f"ports {port}-{port + TRACKER_PORTS_TRIED - 1} all hold trackers that refuse this checkout's "
                       f"token; stop one (`moelab demo --stop` in its checkout) or pass --port")


def _start_tracker(root: Path, port: int) -> str:
    url = f"http://127.0.0.1:{port}"
    logs = root / "runs"
    logs.mkdir(exist_ok=True)
    typer.echo(f"tracker: starting on {url} (log: runs/tracker.log)")
    with open(logs / "tracker.log", "ab") as log:
        proc = start_recorded(root / RECORD_FILE, "tracker", [_bin("moelab"), "tracker", "serve", "--port", str(port)],
                              cwd=root, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(60):
        if _http_ok(f"{url}/healthz"):
            return url
        if proc.poll() is not None:
            raise RuntimeError(f"the tracker exited with code {proc.returncode}; see runs/tracker.log")
        time.sleep(0.5)
    raise RuntimeError(f"the tracker did not come up on {url}; see runs/tracker.log")


def stop_demo(root: Path) -> None:
    """Stop what this directory's demo started (recorded in runs/demo-processes.json), nothing else."""
    lines = stop_recorded(root / RECORD_FILE, grace_s=STOP_GRACE_S)
    for line in lines:
        typer.echo(line)
    if not lines:
        typer.echo(f"nothing to stop: {RECORD_FILE} records no process this demo started (a Ray head or tracker "
                   "the demo found already running is not its to stop)")


def _token_file(root: Path) -> Path:
    from shared.config import load_config

    return root / load_config(root / "configs" / "demo.yaml").tracker.token_file


def _token(root: Path) -> str | None:
    from shared.config import load_config
    from shared.tracking import _resolve_token

    t = load_config(root / "configs" / "demo.yaml").tracker
    return _resolve_token(None, t.token_env, str(root / t.token_file))


def print_summary(summary: dict, tracker_url: str) -> list[str]:
    """Print the run's summary; returns the lines printed (for the transcript)."""
    docs, train = summary["documents"], summary["train"]
    lines = ["", "== summary",
             f"documents: raw {docs['raw']} → after filters+dedup {docs['after_filter']} → "
             f"kept by the scorer {docs['kept']} (keep rate {summary['keep_rate']:.0%})"]
    for source, n in (summary.get("sources") or {}).items():
        lines.append(f"  {source:>16}: {n['train']} train / {n['eval']} held-out documents")
    sc = summary.get("scorer") or {}
    if sc.get("held_out_spearman"):
        agreement = ", ".join(f"{n} " + " / ".join(f"{head.capitalize()} {v:.2f}" for head, v in heads.items() if v is not None)
                              for n, heads in sc["held_out_spearman"].items())
        saved = f"{sc['flops_saved']:.0%}" if sc.get("flops_saved") is not None else "n/a"
        lines.append(f"scorer: held-out Spearman vs the oracle {agreement}; early exit saved {saved} of "
                     f"backbone FLOPs on the held-out split")
    tokens = summary.get("tokens") or {}
    if tokens.get("tokens"):
        lines.append(f"tokens: {tokens['tokens']:,} in the shards ({tokens.get('docs', 0):,} documents)")
    mfu = f"{train['mfu']:.2%}" if train.get("mfu") is not None else "n/a"
    lines.append(f"train: {train['steps']} steps, loss {train['loss']:.3f}, eval loss {train.get('eval/loss', float('nan')):.3f}, "
                 f"{train['tokens_per_s']:,.0f} tokens/s, MFU {mfu}")
    for name, st in summary["stages"].items():
        lines.append(f"  stage {name:>9}: {'skipped' if st['skipped'] else str(st['seconds']) + ' s'}")
    lines.append(f"dashboard: {tracker_url}/")
    for line in lines:
        typer.secho(line, bold=line.startswith(("== ", "dashboard:")))
    return lines


# The demo's own ablation: the smallest that gives an interval (raw vs curated, 2 seeds, 40 steps,
# a bounded slice of the evaluation suite), so the whole demo stays near 15 minutes on 2 cores;
# `moelab ablate configs/demo-ablation.yaml` runs the full one (three arms, three seeds, 100 steps).
DEMO_ABLATION_SIZE = ["ablation.seeds=2", "train.steps=40", "ablation.reference_texts=16", "ablation.task_items=32"]


def demo_ablation_overrides(runs: Path) -> list[str]:
    """The small ablation's arms and output, by absolute path under `runs`: the job runs in the copy
    of the repository that `ray job submit --working-dir` uploads, and that copy leaves out what
    .gitignore names, runs/ included, so a relative `runs/...` would find no kept set and write the
    report where no one looks. The raw arm is committed data, which the copy holds."""
    kept = runs / "pipeline" / "demo" / "kept" / "train" / "*.parquet"
    return [f"ablation.arms=[{{name: raw, documents: ['data/demo/*.jsonl.gz']}}, {{name: curated, documents: ['{kept}']}}]",
            *DEMO_ABLATION_SIZE, f"ablation.out_dir={runs / 'ablation' / 'demo-small'}"]


def run_demo_ablation(root: Path, runs: Path, tracker_url: str, env: dict[str, str], transcript: DemoTranscript) -> None:
    """Submit the demo's small ablation as a second Ray job and print its verdict lines, whatever they say."""
    cmd = [_bin("ray"), "job", "submit", "--address", DEMO_HEAD.dashboard, "--working-dir", str(root),
           "--runtime-env-json", json.dumps({"env_vars": env}), "--", sys.executable, "-m", "cluster.ablation",
           "configs/demo-ablation.yaml", *demo_ablation_overrides(runs), f"tracker.url={tracker_url}", "tracker.mode=online",
           f"tracker.spool_dir={runs / 'spool'}"]
    typer.echo("submitting the data ablation: python -m cluster.ablation configs/demo-ablation.yaml (raw vs curated)")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**ray_env(DEMO_HEAD), "RAY_ADDRESS": DEMO_HEAD.dashboard})
    last = None
    for line in proc.stdout:
        sys.stdout.write(line)
        transcript.add(line)
        if line.startswith("{") and '"verdicts"' in line:
            last = json.loads(line)
    if proc.wait() != 0 or last is None:
        typer.secho("the ablation job failed (see the log above)", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)
    lines = ["", "== data ablation (raw vs curated, 2 seeds)", *(f"verdict: {v}" for v in last["verdicts"]),
             f"report: {last['files']['markdown']}"]
    for line in lines:
        typer.secho(line, bold=line.startswith("== "))
        transcript.add(line)


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        config: str = typer.Option("configs/demo.yaml", "--config", help="Pipeline config to submit."),
        port: int = typer.Option(8000, "--port", help="Tracker port."),
        cpus: int = typer.Option(2, "--cpus", help="CPUs for the local Ray head."),
        stop: bool = typer.Option(False, "--stop", help="Stop the Ray head and tracker this demo started (nothing else)."),
        ablation: bool = typer.Option(True, "--ablation/--no-ablation",
                                      help="End with the small raw-vs-curated data ablation and its verdict."),
    ) -> None:
        """Run the whole data-to-model pipeline on the demo corpus as a `ray job submit`."""
        root = Path.cwd()
        if stop:
            stop_demo(root)
            return
        transcript = DemoTranscript(root, cpus)
        try:
            _run(root, config, port, cpus, ablation, transcript)
        except BaseException as exc:  # a failed or interrupted run keeps its record too
            why = f"exit {exc.exit_code}" if isinstance(exc, typer.Exit) else type(exc).__name__
            typer.echo(f"transcript: {transcript.write(transcript.stages, f'failed ({why})')}")
            raise
        typer.echo(f"transcript: {transcript.write(transcript.stages, 'finished')}")


def _run(root: Path, config: str, port: int, cpus: int, ablation: bool, transcript: DemoTranscript) -> None:
    """Start Ray and the tracker, submit the pipeline, print its summary and the frozen router of the
    model it trained (and the ablation's verdicts)."""
    ensure_ray(root, cpus)
    tracker_url = ensure_tracker(root, port)
    env = {"MOELAB_TRACKER_TOKEN": _token(root) or "", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    runs = root / "runs"
    cmd = [_bin("ray"), "job", "submit", "--address", DEMO_HEAD.dashboard, "--working-dir", str(root),
           "--runtime-env-json", json.dumps({"env_vars": env}), "--",
           sys.executable, "-m", "cluster.pipeline", config, f"train.out_dir={runs}",
           f"tracker.url={tracker_url}", f"tracker.spool_dir={runs / 'spool'}"]
    typer.echo("submitting: " + " ".join(cmd[:6]) + " … -- python -m cluster.pipeline " + config)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**ray_env(), "RAY_ADDRESS": DEMO_HEAD.dashboard})
    last_json = None
    for line in proc.stdout:
        sys.stdout.write(line)
        transcript.add(line)
        if line.startswith("{") and '"documents"' in line:
            last_json = line
    if proc.wait() != 0 or last_json is None:
        typer.secho("the pipeline job failed (see the log above)", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1)
    summary = json.loads(last_json)
    transcript.stages = summary.get("stages")
    for line in print_summary(summary, tracker_url):
        transcript.add(line)
    for line in measure_frozen_router(demo_run_folder(root, config, runs)):
        transcript.add(line)
    if ablation:
        run_demo_ablation(root, runs, tracker_url, env, transcript)
