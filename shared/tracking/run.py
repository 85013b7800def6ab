"""A tracked run: the calls a stage makes (`log`, `log_histogram`, `event`, …), each cheap and thread-safe.

Every call checks its item against the tracker's own schema (`shared.tracking.schema`) before it
is buffered, so a value the server would refuse fails here, in the caller, with the rule it broke,
instead of costing the batch it would have travelled in. Nothing here waits for the network; the
`Sender` thread delivers.
"""

from __future__ import annotations

import atexit
import math
import operator
import os
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shared.tracking.buffer import Buffer
from shared.tracking.delivery import Delivery
from shared.tracking.schema import (
    KEY_RE,
    MAX_STEP,
    ArtifactIn,
    EventIn,
    HistogramIn,
    check,
    encode_number,
)
from shared.tracking.sender import Sender
from shared.tracking.spool import RejectedLog, Spool
from shared.tracking.summaries import bin_samples, calibration_bins, hash_path
from shared.tracking.system import SystemMonitor
from shared.tracking.transport import Transport

_KEY = re.compile(KEY_RE)


def check_step(step: Any) -> int:
    """A step as the server takes it: an integer in [0, 2**53) (integral floats are accepted)."""
    try:
        value = operator.index(step)
    except TypeError:
        if not (isinstance(step, float) and step.is_integer()):
            raise TypeError(f"step must be an integer, got {type(step).__name__}: {step!r}") from None
        value = int(step)
    if not 0 <= value <= MAX_STEP:
        raise ValueError(f"step must be in [0, {MAX_STEP}], got {value}")
    return value


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
        heartbeat_s: float = 10.0,
        max_batch_bytes: int = 8 << 20,
        first_step: int = 0,
        system_metrics_s: float = 0.0,
    ):
        self.id, self.project, self.name, self.mode, self.url = run_id, project, name, mode, url
        self._disabled = mode == "disabled"
        self._lock = threading.Condition()
        self._buffer = Buffer()
        self._keys_ok: set[str] = set()
        self._auto_step = first_step  # a resumed run continues after the server's highest step
        self._finished = False
        self._delivery: Delivery | None = None
        self.points_logged = 0  # by `log`
        self.system_points_logged = 0  # by the system monitor (`shared.tracking.system`)
        self.refused: list[dict[str, Any]] = []  # what the server refused (each with its reason)
        if self._disabled:
            return
        self._spool = Spool(Path(spool_dir) / f"{run_id}.jsonl")
        self._rejected = RejectedLog(self._spool.rejected_path, on_refuse=self.refused.append)
        self._sender = Sender(
            run_id=run_id, url=url, lock=self._lock, buffer=self._buffer,
            transport=Transport(url, token) if mode == "online" else None,
            spool=self._spool, rejected=self._rejected, init_op={"op": "init", "run": run_id, "body": init_body},
            flush_interval=flush_interval, retry_max_s=retry_max_s, heartbeat_s=heartbeat_s,
            max_batch_points=max_batch_points, max_batch_bytes=max_batch_bytes,
        )
        self._sender.start()
        self._monitor = SystemMonitor(self._log_system, system_metrics_s) if system_metrics_s > 0 else None
        if self._monitor is not None:
            self._monitor.start()
        atexit.register(self._atexit)

    # ------------------------------------------------------------ logging
    def _key(self, key: Any) -> str:
        key = str(key)
        if key not in self._keys_ok:
            if not _KEY.match(key):
                raise ValueError(
                    f"metric key {key!r} is not allowed: use 1-200 of letters, digits, space and _ . - / : @ % + = [ ]"
                )
            self._keys_ok.add(key)
        return key

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Scalars at one step (auto-incremented per call when omitted). NaN/±Inf are kept and counted."""
        if self._disabled:
            return
        wall = time.time()
        # a key already checked and a finite Python float (what encode_number returns unchanged) skip
        # the checks and the error text, which cost more than the rest of `log` at four keys per step
        known = self._keys_ok
        encoded = [(k if k in known else self._key(k),
                    v if type(v) is float and math.isfinite(v) else encode_number(v, f"metric {k!r}"))
                   for k, v in metrics.items()]
        step = None if step is None else check_step(step)
        with self._lock:
            if step is None:
                step = self._auto_step
            self._auto_step = max(self._auto_step, step + 1)
            self._buffer.add_points(step, wall, encoded)
            self.points_logged += len(encoded)
            if self._buffer.pending >= self._sender.max_batch_points:
                self._lock.notify()

    def _log_system(self, metrics: dict[str, float], sample: int) -> None:
        """A system sample at its own step (the sample number), leaving the run's step count alone."""
        wall = time.time()
        with self._lock:
            self._buffer.add_points(sample, wall, [(k, encode_number(v, f"metric {k!r}")) for k, v in metrics.items()])
            self.system_points_logged += len(metrics)

    def _add(self, field: str, item: dict[str, Any], size: int) -> None:
        with self._lock:
            self._buffer.add_item(field, item, size)

    def _step_or_last(self, step: int | None) -> int:
        return max(self._auto_step - 1, 0) if step is None else check_step(step)

    def log_histogram(self, key: str, values: Sequence[float], step: int | None = None, bins: int | None = None) -> None:
        """A vector at one step: per-expert counts as given, or raw samples binned into `bins`."""
        if self._disabled:
            return
        key = self._key(key)
        try:
            vals = [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
        except OverflowError:
            raise ValueError(f"histogram {key!r} has a value too large for a float64") from None
        edges = None
        if bins:
            vals, edges = bin_samples(vals, bins)
        if not all(math.isfinite(v) for v in vals):
            raise ValueError(f"histogram {key!r} has NaN/Inf entries; log counts (finite numbers) instead")
        item = {"key": key, "step": self._step_or_last(step), "wall": time.time(), "values": vals, "edges": edges}
        self._add("histograms", item, check(HistogramIn, item, f"histogram {key!r}"))

    def event(self, kind: str, message: str = "", /, step: int | None = None, **data: Any) -> None:
        """Something that happened (router-health warning, stage summary), drawn on the timeline.

        `kind` and `message` are positional-only, so `data` may itself carry keys named
        `kind` or `message` (e.g. the trainer's `event("router_health", msg, kind="dead_expert")`)."""
        if self._disabled:
            return
        item = {"kind": kind, "message": message, "data": data,
                "step": None if step is None else check_step(step), "wall": time.time()}
        self._add("events", item, check(EventIn, item, f"event {kind!r}"))

    def log_funnel(self, stages: Mapping[str, int], name: str = "documents", step: int | None = None) -> None:
        """Counts per pipeline stage, in order (raw → each filter → kept): the dashboard's funnel.

        One funnel per `name`: the corpus as `documents`, a source as `documents/<source>`."""
        rows = [{"stage": str(k), "count": int(v)} for k, v in stages.items()]
        self.event("funnel", f"{name}: {rows[0]['count'] if rows else 0} → {rows[-1]['count'] if rows else 0}",
                   step=step, name=name, stages=rows)

    def log_calibration(
        self, predicted: Sequence[float], observed: Sequence[float], name: str = "score", bins: int = 10,
        step: int | None = None,
    ) -> None:
        """Reliability diagram: mean observed per bin of predicted score, plus the ECE over bins.

        Predicted and observed are on one scale (e.g. 0-4 rubric scores); the dashboard draws
        each bin at (mean predicted, mean observed) against the diagonal, with its count."""
        summary = calibration_bins(predicted, observed, bins)
        self.event("calibration", f"{name}: ECE {summary['ece']:.4f} over {summary['n']} items", step=step,
                   name=name, **summary)

    def artifact(self, path: str | os.PathLike, name: str | None = None, kind: str = "file",
                 meta: Mapping[str, Any] | None = None) -> str | None:
        """Record a checkpoint/dataset by path and SHA-256 (a directory hashes its sorted file list)."""
        if self._disabled:
            return None
        p = Path(path)
        digest, size = hash_path(p) if p.exists() else (None, None)
        item = {"name": name or p.name or str(p), "kind": kind, "path": str(p), "sha256": digest, "size": size,
                "meta": dict(meta or {})}
        self._add("artifacts", item, check(ArtifactIn, item, f"artifact {item['name']!r}"))
        return digest

    # ------------------------------------------------------------ delivery
    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything logged so far was delivered (online) or spooled; True on success."""
        if self._disabled:
            return True
        deadline = time.time() + timeout
        with self._lock:
            self._lock.notify()
        while time.time() < deadline:
            if self._sender.idle():
                return True
            time.sleep(0.02)
        return False

    def finish(self, status: str = "finished", timeout: float = 30.0) -> Delivery:
        """Deliver everything and mark the run finished; returns what was stored, left spooled and
        refused (`Delivery.complete` is True only when every point is on the server). Leaves a
        spool (and says so) if it cannot deliver; a second call returns the first call's counts."""
        if self._delivery is not None:
            return self._delivery
        if self._disabled:
            self._delivery = Delivery(self.id, self.mode, self.points_logged, 0, 0, 0, 0)
            return self._delivery
        self._finished = True
        if self._monitor is not None:  # no sample may arrive after the sender's last batch
            self._monitor.stop()
            self._monitor.join(5.0)
        self._sender.close({"op": "finish", "run": self.id, "body": {"status": status, "wall": time.time()}}, timeout)
        ops_spooled, points_spooled = self._spool.pending()
        self._delivery = Delivery(
            run_id=self.id, mode=self.mode, points_logged=self.points_logged + self.system_points_logged,
            points_stored=self._sender.points_stored, points_spooled=points_spooled, ops_spooled=ops_spooled,
            refused=len(self.refused), spool_path=str(self._spool.path) if ops_spooled else None,
            rejected_path=str(self._rejected.path) if self.refused else None,
        )
        if self._spool.exists():
            why = "is offline" if self.mode == "offline" else f"could not reach {self.url}"
            print(f"tracking: run {self.id} {why}; {points_spooled:,} points in {ops_spooled} op(s) are kept in "
                  f"{self._spool.path}. Upload them with `moelab tracker sync`.", file=sys.stderr)
        if self.refused:
            print(f"tracking: run {self.id}: the server refused {len(self.refused)} op(s) or item(s); "
                  f"they are kept in {self._rejected.path}", file=sys.stderr)
        return self._delivery

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish("failed" if exc_type else "finished")

    def _atexit(self) -> None:
        if not self._finished:
            self.finish("finished", timeout=10.0)
