"""`tracking.init`: where a run's settings come from (arguments, then the config's `tracker` section)."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def resolve_token(token: str | None, token_env: str, token_file: str) -> str | None:
    """The API token: the argument, else the environment variable, else the token file."""
    if token:
        return token
    if os.environ.get(token_env):
        return os.environ[token_env]
    path = Path(token_file)
    return path.read_text().strip() if path.is_file() else None


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
) -> Run:
    """Start (or, with `id=`, resume) a run. `config` may be a dict or an `ExperimentConfig`, whose
    `tracker` section supplies url, project, mode, spool_dir and token location unless given here.

    Raises ValueError at once when the tracker would refuse the run (a project, name or tag outside
    its rules, a config JSON cannot carry such as a NaN), so no run is silently missing later."""
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
    if mode != "disabled":
        check(RunCreate, body, f"run {name!r}")
    return Run(
        run_id=run_id,
        project=project,
        name=name,
        mode=mode,
        url=url or tcfg.url,
        token=resolve_token(token, tcfg.token_env, tcfg.token_file),
        spool_dir=spool_dir or tcfg.spool_dir,
        flush_interval=tcfg.flush_interval_s if flush_interval is None else flush_interval,
        retry_max_s=retry_max_s,
        max_batch_points=max_batch_points,
        heartbeat_s=tcfg.heartbeat_s if heartbeat_s is None else heartbeat_s,
        init_body=body,
    )
