"""The tracking client every moelab stage reports through (a small, W&B-like API; stable).

    from shared import tracking
    run = tracking.init(project="moe-ablation", config=cfg, name="top2-fp8", tags=["fp8"], parent=None)
    run.log({"loss": 2.31, "lr": 3e-4, "tokens_per_s": 41_000, "mfu": 0.38}, step=120)
    run.log_histogram("router/load/layer3", per_expert_token_counts, step=120)   # → heatmap row
    run.event("router_health", "expert 5 dead for 200 steps", layer=3, expert=5, step=120)
    run.artifact("runs/ckpt/step_1000", kind="checkpoint")                      # path + sha256
    run.finish()

Why our own client: it must never block or lose a point. `log` only appends to an in-memory
buffer; a background thread sends a batch every `flush_interval` seconds (columnar JSON, one
request for all keys). When the server is unreachable each batch is appended to a local spool
file (`<spool_dir>/<run_id>.jsonl`) and replayed in order once the server answers; the server
stores a batch id once, so a batch replayed twice is not double counted. `mode="offline"` only
spools (upload later with `moelab tracker sync`), `mode="disabled"` makes every call a no-op.
Resume a run by passing its id: `tracking.init(id=run.id, ...)`.

Conventions the dashboard renders (keys are free-form; these names get dedicated charts):
- scalars: `loss`, `lr`, `tokens_per_s`, `mfu`, `eval/loss` (training); `router/maxvio`,
  `router/dead_experts` (router health; `router/maxvio/layerN` per layer works too).
- histograms: `router/load/layerN` with one value per expert (token counts) → an expert-load
  heatmap per layer over steps. `log_histogram(key, samples, bins=30)` bins raw samples instead.
- events: any `kind`; `router_health` and `warning` are drawn red on the timeline.
- funnels: `run.log_funnel({"raw": 10_000, "language": 7_400, "dedup": 5_100}, name="documents")`
  sends an event of kind `funnel` (data: name, ordered stages with counts) → funnel chart.
- calibration: `run.log_calibration(predicted, observed, name="helpfulness", bins=10)` sends an
  event of kind `calibration` (data: name, bins with mean predicted/observed and count, ECE) →
  reliability diagram. Predicted and observed are on the same scale (e.g. 0–4 rubric scores).
Non-finite values (NaN, ±Inf) are sent explicitly and counted by the server, never dropped.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from shared.config.tracker import TrackerConfig

__all__ = ["Run", "init", "sync", "replay_spool"]

_NONFINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
# The server's rule for metric/histogram keys (services/tracker/schemas.py KEY_RE), checked here so
# a bad key fails in the caller instead of getting its whole batch rejected later.
_KEY = re.compile(r"^[A-Za-z0-9_.\-/:@%+=\[\] ]{1,200}$")


def _check_key(key: str) -> str:
    key = str(key)
    if not _KEY.match(key):
        raise ValueError(f"metric key {key!r} is not allowed: use 1-200 of letters, digits, space and _ . - / : @ % + = [ ]")
    return key


def _num(value: Any, what: str) -> float | str:
    """A JSON-safe number: NaN/±Inf become the strings the server accepts; bad types fail here."""
    if hasattr(value, "item"):  # torch / numpy scalars
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}: {value!r}")
    value = float(value)
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else _NONFINITE[value]


@functools.lru_cache(maxsize=8)
def _git_commit(cwd: str | None = None) -> str | None:
    """HEAD of the repository the process runs in (once per process: runs of one job share it)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2, cwd=cwd)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _resolve_token(token: str | None, token_env: str, token_file: str) -> str | None:
    if token:
        return token
    if os.environ.get(token_env):
        return os.environ[token_env]
    path = Path(token_file)
    return path.read_text().strip() if path.is_file() else None


class _Transport:
    """Sends ops to the server; raises `_Unreachable` for anything worth retrying later."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        self.headers = {"content-type": "application/json"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.url, self.timeout = url.rstrip("/"), timeout
        self.client: httpx.Client | None = None  # made on first send, in the sender thread (~0.2 s)

    def send(self, op: dict[str, Any]) -> None:
        if self.client is None:
            self.client = httpx.Client(base_url=self.url, headers=self.headers,
                                       timeout=httpx.Timeout(self.timeout, connect=3.0))
        kind, run_id, body = op["op"], op["run"], op["body"]
        path = {"init": "/api/runs", "batch": f"/api/runs/{run_id}/batch", "finish": f"/api/runs/{run_id}/finish"}[kind]
        try:
            resp = self.client.post(path, content=json.dumps(body, allow_nan=False))
        except httpx.HTTPError as exc:
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code in (401, 403) or resp.status_code >= 500 or resp.status_code == 429:
            raise _Unreachable(f"HTTP {resp.status_code}: {resp.text[:300]}")
        if resp.status_code >= 400:
            raise _Rejected(f"HTTP {resp.status_code} for {kind}: {resp.text[:1000]}")

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


class _Unreachable(Exception):
    pass


class _Rejected(Exception):
    pass


class _Spool:
    """An append-only JSONL file of ops not yet delivered, replayed in order."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, op: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(op, allow_nan=False) + "\n")

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    def replay(self, transport: _Transport) -> int:
        """Send every spooled op in order; keep the undelivered tail (atomically) on failure."""
        if not self.exists():
            return 0
        lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
        sent = 0
        for i, line in enumerate(lines):
            try:
                op = json.loads(line)
            except json.JSONDecodeError:
                print(f"tracking: skipping a torn line {i + 1} in {self.path}", file=sys.stderr)
                continue
            try:
                transport.send(op)
            except _Unreachable:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text("".join(x + "\n" for x in lines[i:]))
                os.replace(tmp, self.path)
                raise
            except _Rejected as exc:
                _reject(self.path, op, exc)
            sent += 1
        self.path.unlink()
        return sent


def _reject(spool_path: Path, op: dict[str, Any], exc: Exception) -> None:
    """A server-rejected op is kept in `<run>.rejected.jsonl` (never silently dropped) and reported."""
    path = spool_path.with_suffix(".rejected.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps({"error": str(exc), "op": op}) + "\n")
    print(f"tracking: the server rejected a {op['op']} ({exc}); kept in {path}", file=sys.stderr)


class Run:
    """A tracked run. Every method is cheap and thread-safe; none waits for the network."""

    def __init__(
        self,
        *,
        run_id: str,
        project: str,
        name: str,
        mode: str,
        url: str,
        token: str | None,
        spool_dir: str,
        flush_interval: float,
        retry_max_s: float,
        max_batch_points: int,
        init_body: dict[str, Any],
    ):
        self.id, self.project, self.name, self.mode, self.url = run_id, project, name, mode, url
        self._disabled = mode == "disabled"
        self._lock = threading.Condition()
        self._metrics: dict[str, tuple[list, list, list]] = {}
        self._hist: list[dict] = []
        self._events: list[dict] = []
        self._artifacts: list[dict] = []
        self._pending = 0
        self._auto_step = 0
        self._closing = False
        self._finished = False
        self._flush_interval = flush_interval
        self._retry_max_s = retry_max_s
        self._max_batch_points = max_batch_points
        self.points_logged = 0
        self._busy = False
        self._warned = False
        self._finish_timeout = 30.0
        if self._disabled:
            return
        self._spool = _Spool(Path(spool_dir) / f"{run_id}.jsonl")
        self._transport = _Transport(url, token) if mode == "online" else None
        self._ops: list[dict[str, Any]] = [{"op": "init", "run": run_id, "body": init_body}]
        self._next_retry = 0.0
        self._backoff = 0.25
        self._thread = threading.Thread(target=self._loop, name=f"tracking-{run_id}", daemon=True)
        self._thread.start()
        atexit.register(self._atexit)

    # ------------------------------------------------------------ public API
    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Scalars at one step (auto-incremented per call when omitted)."""
        if self._disabled:
            return
        wall = time.time()
        encoded = [(_check_key(k), _num(v, f"metric {k!r}")) for k, v in metrics.items()]
        if step is not None and int(step) < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        with self._lock:
            if step is None:
                step = self._auto_step
            self._auto_step = max(self._auto_step, int(step) + 1)
            for key, value in encoded:
                cols = self._metrics.get(key)
                if cols is None:
                    cols = self._metrics[key] = ([], [], [])
                cols[0].append(int(step))
                cols[1].append(wall)
                cols[2].append(value)
            self._pending += len(encoded)
            self.points_logged += len(encoded)
            if self._pending >= self._max_batch_points:
                self._lock.notify()

    def log_histogram(self, key: str, values: Sequence[float], step: int | None = None, bins: int | None = None) -> None:
        """A vector at one step: per-expert counts as given, or raw samples binned into `bins`."""
        if self._disabled:
            return
        key = _check_key(key)
        vals = [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
        edges = None
        if bins:
            finite = [v for v in vals if math.isfinite(v)]
            lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
            hi = hi if hi > lo else lo + 1.0
            counts = [0.0] * bins
            for v in finite:
                counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
            edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
            vals = counts
        vals = [_num(v, f"histogram {key!r} value") for v in vals]
        if any(isinstance(v, str) for v in vals):
            raise ValueError(f"histogram {key!r} has NaN/Inf entries; log counts (finite numbers) instead")
        with self._lock:
            s = self._auto_step - 1 if step is None else int(step)
            self._hist.append({"key": key, "step": max(s, 0), "wall": time.time(), "values": vals, "edges": edges})
            self._pending += 1

    def event(self, kind: str, message: str = "", /, step: int | None = None, **data: Any) -> None:
        """Something that happened (router-health warning, stage summary), drawn on the timeline.

        `kind` and `message` are positional-only, so `data` may itself carry keys named
        `kind` or `message` (e.g. the trainer's `event("router_health", msg, kind="dead_expert")`)."""
        if self._disabled:
            return
        json.dumps(data, allow_nan=False)  # fail here, in the caller, on data JSON cannot carry
        with self._lock:
            self._events.append({"kind": kind, "message": message, "data": data, "step": step, "wall": time.time()})
            self._pending += 1

    def log_funnel(self, stages: Mapping[str, int], name: str = "documents", step: int | None = None) -> None:
        """Counts per pipeline stage, in order (raw → each filter → kept): the dashboard's funnel."""
        rows = [{"stage": str(k), "count": int(v)} for k, v in stages.items()]
        self.event("funnel", f"{name}: {rows[0]['count'] if rows else 0} → {rows[-1]['count'] if rows else 0}",
                   step=step, name=name, stages=rows)

    def log_calibration(
        self, predicted: Sequence[float], observed: Sequence[float], name: str = "score", bins: int = 10,
        step: int | None = None,
    ) -> None:
        """Reliability diagram: mean observed per bin of predicted score, plus the ECE over bins."""
        pred = [float(x) for x in predicted]
        obs = [float(x) for x in observed]
        if len(pred) != len(obs) or not pred:
            raise ValueError(f"calibration needs equal, non-empty predicted/observed (got {len(pred)}, {len(obs)})")
        lo, hi = min(pred), max(pred)
        hi = hi if hi > lo else lo + 1.0
        acc = [[0.0, 0.0, 0] for _ in range(bins)]
        for p, o in zip(pred, obs, strict=True):
            b = acc[min(bins - 1, int((p - lo) / (hi - lo) * bins))]
            b[0] += p
            b[1] += o
            b[2] += 1
        rows = [{"predicted": p / n, "observed": o / n, "count": n} for p, o, n in acc if n]
        ece = sum(r["count"] * abs(r["predicted"] - r["observed"]) for r in rows) / len(pred)
        self.event("calibration", f"{name}: ECE {ece:.4f} over {len(pred)} items", step=step,
                   name=name, bins=rows, ece=ece, n=len(pred))

    def artifact(self, path: str | os.PathLike, name: str | None = None, kind: str = "file",
                 meta: Mapping[str, Any] | None = None) -> str | None:
        """Record a checkpoint/dataset by path and SHA-256 (a directory hashes its sorted file list)."""
        if self._disabled:
            return None
        p = Path(path)
        digest, size = _hash_path(p) if p.exists() else (None, None)
        with self._lock:
            self._artifacts.append({"name": name or p.name or str(p), "kind": kind, "path": str(p),
                                    "sha256": digest, "size": size, "meta": dict(meta or {})})
            self._pending += 1
        return digest

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything logged so far was delivered (online) or spooled; True on success."""
        if self._disabled:
            return True
        deadline = time.time() + timeout
        with self._lock:
            self._lock.notify()
        while time.time() < deadline:
            with self._lock:
                idle = not self._pending and not self._ops and not self._busy
            if idle and (self.mode == "offline" or not self._spool.exists()):
                return True
            time.sleep(0.02)
        return False

    def finish(self, status: str = "finished", timeout: float = 30.0) -> None:
        """Deliver everything and mark the run finished; leaves a spool (and says so) if it cannot."""
        if self._disabled or self._finished:
            return
        self._finished = True
        self._finish_timeout = timeout
        with self._lock:
            self._ops_after = {"op": "finish", "run": self.id, "body": {"status": status, "wall": time.time()}}
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout + 5.0)
        if self._transport:
            self._transport.close()
        if self._spool.exists():
            why = "is offline" if self.mode == "offline" else f"could not reach {self.url}"
            print(f"tracking: run {self.id} {why}; its data is kept in {self._spool.path}. "
                  "Upload it with `moelab tracker sync`.", file=sys.stderr)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish("failed" if exc_type else "finished")

    # ------------------------------------------------------------ background thread
    def _take_batches(self) -> list[dict[str, Any]]:
        """Everything buffered, as batch ops of at most `max_batch_points` scalar points each
        (the server refuses batches over 200,000 points; a long network stall can buffer more)."""
        if not self._pending:
            return []
        metrics, self._metrics = self._metrics, {}
        parts: list[dict[str, Any]] = [{}]
        room = self._max_batch_points
        for key, (steps, walls, values) in metrics.items():
            i = 0
            while i < len(steps):
                if room == 0:
                    parts.append({})
                    room = self._max_batch_points
                j = min(len(steps), i + room)
                parts[-1][key] = {"steps": steps[i:j], "walls": walls[i:j], "values": values[i:j]}
                room -= j - i
                i = j
        ops = []
        for n, part in enumerate(parts):
            body = {"batch_id": uuid.uuid4().hex, "metrics": part, "histograms": [], "events": [], "artifacts": []}
            if n == len(parts) - 1:
                body.update(histograms=self._hist, events=self._events, artifacts=self._artifacts)
            ops.append({"op": "batch", "run": self.id, "body": body})
        self._hist, self._events, self._artifacts, self._pending = [], [], [], 0
        return ops

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._closing and self._pending < self._max_batch_points:
                    self._lock.wait(self._flush_interval)
                self._busy = True
                self._ops.extend(self._take_batches())
                closing = self._closing
                if closing:
                    self._ops.append(self._ops_after)
                ops, self._ops = self._ops, []
            try:
                self._deliver(ops, final=closing)
            finally:
                with self._lock:
                    self._busy = False
            if closing:
                return

    def _deliver(self, ops: list[dict[str, Any]], final: bool) -> None:
        if self._transport is None:
            for op in ops:
                self._spool.append(op)
            return
        deadline = time.time() + self._finish_timeout
        pending = list(ops)
        while pending and not self._spool.exists():
            try:
                self._transport.send(pending[0])
                pending.pop(0)
            except _Unreachable as exc:
                self._warn(exc)
                break
            except _Rejected as exc:
                _reject(self._spool.path, pending.pop(0), exc)
        for op in pending:
            self._spool.append(op)
        while self._spool.exists():
            if time.time() >= self._next_retry:
                try:
                    self._spool.replay(self._transport)
                    self._backoff = 0.25
                except _Unreachable as exc:
                    self._warn(exc)
                    self._backoff = min(self._backoff * 2, self._retry_max_s)
                    self._next_retry = time.time() + self._backoff
            if not final or time.time() >= deadline:
                return
            time.sleep(min(0.1, max(0.0, self._next_retry - time.time())))

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            print(f"tracking: cannot deliver to {self.url} ({exc}); spooling to {self._spool.path} and retrying",
                  file=sys.stderr)

    def _atexit(self) -> None:
        if not self._finished:
            self.finish("finished", timeout=10.0)


def _hash_path(p: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
    for f in files:
        fh = hashlib.sha256()
        with open(f, "rb") as fd:
            for block in iter(lambda fd=fd: fd.read(1 << 20), b""):
                fh.update(block)
        size += f.stat().st_size
        if p.is_file():
            return fh.hexdigest(), size
        h.update(f"{f.relative_to(p).as_posix()}\0{fh.hexdigest()}\n".encode())
    return h.hexdigest(), size


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
) -> Run:
    """Start (or, with `id=`, resume) a run. `config` may be a dict or an `ExperimentConfig`, whose
    `tracker` section supplies url, project, mode, spool_dir and token location unless given here."""
    tcfg = getattr(config, "tracker", None)
    tcfg = tcfg if isinstance(tcfg, TrackerConfig) else TrackerConfig()
    cfg_dict = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config or {})
    mode = mode or tcfg.mode
    if mode not in ("online", "offline", "disabled"):
        raise ValueError(f"tracking mode must be online, offline or disabled, got {mode!r}")
    run_id = id or uuid.uuid4().hex[:16]
    project = project or tcfg.project
    name = name or getattr(config, "name", None) or run_id
    json.dumps(cfg_dict, allow_nan=False)  # a config JSON cannot carry fails here, not in the thread
    body = {
        "id": run_id,
        "project": project,
        "name": name,
        "config": cfg_dict,
        "tags": list(tags or []),
        "git_commit": _git_commit(os.getcwd()) if mode != "disabled" else None,
        "host": socket.gethostname(),
        "parent": parent or tcfg.parent or os.environ.get("MOELAB_PARENT_RUN") or None,
        "created": time.time(),
    }
    return Run(
        run_id=run_id,
        project=project,
        name=name,
        mode=mode,
        url=url or tcfg.url,
        token=_resolve_token(token, tcfg.token_env, tcfg.token_file),
        spool_dir=spool_dir or tcfg.spool_dir,
        flush_interval=tcfg.flush_interval_s if flush_interval is None else flush_interval,
        retry_max_s=retry_max_s,
        max_batch_points=max_batch_points,
        init_body=body,
    )


def replay_spool(path: str | os.PathLike, url: str, token: str | None) -> int:
    """Upload one spool file (a run's `<id>.jsonl`); returns the number of ops sent."""
    transport = _Transport(url, token)
    try:
        return _Spool(Path(path)).replay(transport)
    finally:
        transport.close()


def sync(spool_dir: str, url: str, token: str | None) -> dict[str, int]:
    """Upload every spool file in `spool_dir` (offline runs, runs that lost the server)."""
    out: dict[str, int] = {}
    for path in sorted(Path(spool_dir).glob("*.jsonl")):
        if path.name.endswith(".rejected.jsonl"):
            continue
        try:
            out[path.stem] = replay_spool(path, url, token)
        except _Unreachable as exc:
            raise ConnectionError(f"cannot reach the tracker at {url} ({exc}); the spool in {spool_dir} is kept") from None
    return out
