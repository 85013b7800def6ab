"""`tracking.init`: where a run's settings come from (arguments, then the config's `tracker` section)."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from shared.config.tracker import TrackerConfig
from shared.tracking.run import Run
from shared.tracking.schema import RunCreate, check

MODES = ("online", "offline", "disabled")


@functools.lru_cache(maxsize=8)
def git_commit(cwd: str | None = None) -> str | None:
    """HEAD of the repository the process runs in (once per process: runs of one job share it)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2, cwd=cwd)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def server_token_file(token_file: str, port: int) -> Path:
    """The token file of the tracker on `port` (`runs/tracker.8001.token` beside `runs/tracker.token`).

    Why one file per port: two trackers started from one folder (say a scratch store on 8001 beside
    the team's on 8000) would otherwise write their first tokens to the same file, and the clients
    of the first would start sending the second's token and be refused."""
    p = Path(token_file)
    return p.with_name(f"{p.stem}.{port}{p.suffix}")


def url_port(url: str | None) -> int | None:
    """The port a tracker URL names (its scheme's default when it names none)."""
    if not url:
        return None
    parts = urlsplit(url)
    try:
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


def resolve_token(token: str | None, token_env: str, token_file: str, url: str | None = None) -> str | None:
    """The API token: the argument, else the environment variable, else the token file of the
    server at `url` (`server_token_file`), else the shared token file."""
    if token:
        return token
    if os.environ.get(token_env):
        return os.environ[token_env]
    port = url_port(url)
    paths = ([server_token_file(token_file, port)] if port else []) + [Path(token_file)]
    for path in paths:
        if path.is_file():
            return path.read_text().strip()
    return None


def init(
    project: str | None = None,
    config: Any = None,
    name: str | None = None,
    tags: Sequence[str] | None = None,
    parent: str | None = None,
    *,
    id: str | None = None,
    mode: str | None = None,
    url: str | None = None,
    token: str | None = None,
    spool_dir: str | None = None,
    flush_interval: float | None = None,
    retry_max_s: float = 10.0,
    max_batch_points: int = 50_000,
    heartbeat_s: float | None = None,
    fork_from: str | None = None,
    fork_step: int | None = None,
    system_metrics_s: float = 30.0,
) -> Run:
    """Start (or, with `id=`, resume) a run. `config` may be a dict or an `ExperimentConfig`, whose
    `tracker` section supplies url, project, mode, spool_dir and token location unless given here.

    Raises ValueError at once when the tracker would refuse the run (a project, name or tag outside
    its rules, a config JSON cannot carry such as a NaN), so no run is silently missing later.

    `fork_from=<run id>, fork_step=N` starts a new run from another's history: the server copies
    its points up to step N, the new run keeps the source's project, config, tags and parent unless
    given here, records `fork_of`/`fork_step`, and `log` without a step continues at N + 1.

    Every `system_metrics_s` seconds (0: never) the run logs CPU, memory and, where the process
    uses CUDA, GPU figures under `system/…` (`shared.tracking.system`)."""
    given = {"project": project is not None, "name": name is not None or getattr(config, "name", None) is not None,
             "config": config is not None, "tags": tags is not None, "parent": parent is not None}
    tcfg = getattr(config, "tracker", None)
    tcfg = tcfg if isinstance(tcfg, TrackerConfig) else TrackerConfig()
    cfg_dict = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config or {})
    mode = mode or tcfg.mode
    if mode not in MODES:
        raise ValueError(f"tracking mode must be online, offline or disabled, got {mode!r}")
    run_id = id or uuid.uuid4().hex[:16]
    project = project or tcfg.project
    name = name or getattr(config, "name", None) or run_id
    body = {
        "id": run_id,
        "project": project,
        "name": name,
        "config": cfg_dict,
        "tags": list(tags or []),
        "git_commit": git_commit(os.getcwd()) if mode != "disabled" else None,
        "host": socket.gethostname(),
        "parent": parent or tcfg.parent or os.environ.get("MOELAB_PARENT_RUN") or None,
        "created": time.time(),
    }
    if fork_from is not None or fork_step is not None:
        if fork_from is None or fork_step is None:
            raise ValueError("fork_from and fork_step go together: name the run to fork and the last step it keeps")
        if id is not None:
            raise ValueError("a fork is a new run: pass fork_from and fork_step without id=")
        body.update(fork_of=fork_from, fork_step=fork_step)
        for field in ("project", "config", "tags"):  # unless given, the fork takes the source's
            if not given[field]:
                body.pop(field)
    if mode != "disabled":
        check(RunCreate, body, f"run {name!r}")
    first_step = 0
    if fork_from is not None:
        first_step = fork_step + 1
        if mode == "online":
            check_fork_source(url or tcfg.url, resolve_token(token, tcfg.token_env, tcfg.token_file, url or tcfg.url),
                              fork_from)
    if id is not None:
        # a resume sends only what the caller gave, so the server keeps the rest as it was
        body = {k: v for k, v in body.items() if given.get(k, True)}
        if mode == "online":
            first_step = resume_step(url or tcfg.url, resolve_token(token, tcfg.token_env, tcfg.token_file, url or tcfg.url), id,
                                     body.get("project"))
    return Run(
        run_id=run_id,
        project=project,
        name=name,
        mode=mode,
        url=url or tcfg.url,
        token=resolve_token(token, tcfg.token_env, tcfg.token_file, url or tcfg.url),
        spool_dir=spool_dir or tcfg.spool_dir,
        flush_interval=tcfg.flush_interval_s if flush_interval is None else flush_interval,
        retry_max_s=retry_max_s,
        max_batch_points=max_batch_points,
        heartbeat_s=tcfg.heartbeat_s if heartbeat_s is None else heartbeat_s,
        init_body=body,
        first_step=first_step,
        system_metrics_s=system_metrics_s,
    )


def check_fork_source(url: str, token: str | None, run_id: str) -> None:
    """Raise ValueError now when the run to fork does not exist (the server would refuse the fork's
    init later, in the background); an unreachable server is left to the spool."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=5.0) as c:
            found = c.get(f"/api/runs/{run_id}").status_code != 404
    except httpx.HTTPError:
        return
    if not found:
        raise ValueError(f"cannot fork run {run_id!r}: the tracker at {url} has no such run")


def resume_step(url: str, token: str | None, run_id: str, project: str | None) -> int:
    """The step after the highest one the server holds for `run_id` (0 for a new id), so a resumed
    run's `log` without explicit steps continues instead of restarting at 0. Raises ValueError when
    the run exists under another project; an unreachable server gives 0 with a warning."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    base = url.rstrip("/")
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=5.0) as c:
            run = c.get(f"/api/runs/{run_id}")
            if run.status_code == 404:
                return 0
            run.raise_for_status()
            if project is not None and run.json().get("project") != project:
                raise ValueError(f"run {run_id} belongs to project {run.json().get('project')!r}, not {project!r}; "
                                 "resume it without a project or under its own")
            keys = c.get(f"/api/runs/{run_id}/keys")
            keys.raise_for_status()
    except httpx.HTTPError as exc:
        print(f"tracking: could not read run {run_id}'s last step from {base} ({exc}); steps logged without an "
              "explicit step start at 0 — pass step= to log() to continue the run's numbering", file=sys.stderr)
        return 0
    data = keys.json()
    last = [k["last_step"] for k in data.get("scalars", []) + data.get("histograms", []) if k.get("last_step") is not None]
    return max(last) + 1 if last else 0
