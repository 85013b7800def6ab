"""The on-disk side of delivery: the spool of ops not yet delivered and the log of ops refused.

`<spool_dir>/<run_id>.jsonl` holds ops in order until the server takes them (offline mode, or the
server was down); `<run_id>.rejected.jsonl` holds what the server refused, each line with the
server's reason. Neither is ever dropped silently: `sync` replays the spool, then offers every
refused op to the server again (so a fixed server or a hand-repaired line is stored), keeps what
is still refused, and says exactly what that is and where it is kept.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.tracking.transport import Transport, Unreachable, batch_points, deliver


def _write_lines_atomic(path: Path, lines: list[str]) -> None:
    if not lines:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(x + "\n" for x in lines))
    os.replace(tmp, path)


def _read_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


class RejectedLog:
    """`<run>.rejected.jsonl`: refused ops with their reasons; `on_refuse` tells the run (its caller)."""

    def __init__(self, path: Path, on_refuse: Callable[[dict[str, Any]], None] | None = None):
        self.path = path
        self.on_refuse = on_refuse

    def add(self, op: dict[str, Any], reason: str, items: list | None = None) -> None:
        entry = {"error": reason, "op": op, **({"refused": items} if items else {})}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry, allow_nan=False) + "\n")
        print(f"tracking: the server refused a {op['op']} of run {op['run']} ({reason[:500]}); "
              f"kept in {self.path} (`moelab tracker sync` offers it again)", file=sys.stderr)
        if self.on_refuse:
            self.on_refuse(entry)

    def keep_line(self, line: str, reason: str) -> None:
        """Keep a spool line that is not an op (unreadable JSON), with why, instead of dropping it."""
        entry = {"error": reason, "line": line}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")
        print(f"tracking: {reason}; the line is kept in {self.path}", file=sys.stderr)
        if self.on_refuse:
            self.on_refuse(entry)

    def retry(self, transport: Transport) -> list[dict[str, Any]]:
        """Offer every refused op again, in order; keep (and return) what is still refused."""
        lines = _read_lines(self.path)
        if not lines:
            return []
        still: list[dict[str, Any]] = []
        keep: list[str] = []

        def refuse(op, reason, items):
            entry = {"error": reason, "op": op, **({"refused": items} if items else {})}
            still.append(entry)
            keep.append(json.dumps(entry, allow_nan=False))

        for i, line in enumerate(lines):
            try:
                entry = json.loads(line)
                if isinstance(entry, dict) and "line" in entry and "op" not in entry:
                    still.append(entry)  # an unreadable spool line kept by `keep_line`: nothing to resend
                    keep.append(line)
                    continue
                op = entry["op"]
            except (json.JSONDecodeError, KeyError, TypeError):
                still.append({"error": f"line {i + 1} is not a refused op; left as it is", "line": line[:200]})
                keep.append(line)
                continue
            try:
                deliver(transport, op, refuse)
            except Unreachable:
                _write_lines_atomic(self.path, keep + lines[i:])
                raise
        _write_lines_atomic(self.path, keep)
        return still


def _is_op(op: Any) -> bool:
    return isinstance(op, dict) and op.get("op") in ("init", "batch", "finish") and isinstance(op.get("run"), str) \
        and isinstance(op.get("body"), dict)


class Spool:
    """An append-only JSONL file of ops not yet delivered, replayed in order.

    A process killed mid-write leaves its last line torn (no newline): replay skips that line and
    counts it in `torn`. Any other line that is not an op is moved to the rejected log with its
    line number and counted in `malformed`, never dropped unseen. `points_stored` counts the
    scalar points the server took from this spool."""

    def __init__(self, path: Path):
        self.path = path
        self.points_stored = 0
        self.torn = 0
        self.malformed = 0

    def append(self, op: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as f:
            # after a torn write, start on a new line so the torn fragment cannot swallow this op
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write((json.dumps(op, allow_nan=False) + "\n").encode())

    def exists(self) -> bool:
        return self.path.exists() and self.path.stat().st_size > 0

    @property
    def rejected_path(self) -> Path:
        return self.path.with_suffix(".rejected.jsonl")

    def pending(self) -> tuple[int, int]:
        """(ops, scalar points) still in the spool."""
        ops = points = 0
        for line in _read_lines(self.path):
            try:
                op = json.loads(line)
            except json.JSONDecodeError:
                continue
            if _is_op(op):
                ops += 1
                points += batch_points(op["body"]) if op["op"] == "batch" else 0
        return ops, points

    def replay(self, transport: Transport, rejected: RejectedLog | None = None) -> int:
        """Send every spooled op in order; keep the undelivered tail (atomically) on failure."""
        if not self.exists():
            return 0
        rejected = rejected or RejectedLog(self.rejected_path)
        raw = self.path.read_text()
        lines = [ln for ln in raw.splitlines() if ln.strip()]
        torn_at = len(lines) - 1 if lines and not raw.endswith("\n") else None
        sent = 0
        for i, line in enumerate(lines):
            try:
                op = json.loads(line)
                if not _is_op(op):
                    raise ValueError("not an op with op, run and body")
            except ValueError as exc:  # JSONDecodeError is a ValueError
                if i == torn_at:
                    self.torn += 1
                    print(f"tracking: skipping the torn last line {i + 1} of {self.path} "
                          "(a process stopped while writing it)", file=sys.stderr)
                else:
                    self.malformed += 1
                    rejected.keep_line(line, f"line {i + 1} of {self.path} is not a spooled op ({exc})")
                continue
            try:
                self.points_stored += deliver(transport, op, rejected.add)
            except Unreachable:
                _write_lines_atomic(self.path, lines[i:])
                raise
            sent += 1
        self.path.unlink()
        return sent


class SyncResult(dict):
    """Ops uploaded per run id; `.refused` lists what the server still refuses, each with its file;
    `.torn` counts torn last lines skipped (a process stopped while writing them)."""

    def __init__(self):
        super().__init__()
        self.refused: list[dict[str, Any]] = []
        self.torn = 0


def replay_spool(path: str | os.PathLike, url: str, token: str | None) -> int:
    """Upload one spool file (a run's `<id>.jsonl`); returns the number of ops sent."""
    transport = Transport(url, token)
    try:
        return Spool(Path(path)).replay(transport)
    finally:
        transport.close()


def sync(spool_dir: str, url: str, token: str | None) -> SyncResult:
    """Upload every spool in `spool_dir`, then offer every refused op again.

    Returns ops sent per run; `result.refused` holds each op still refused (with the server's
    reason and the file that keeps it). Raises ConnectionError, keeping everything, when the
    server cannot be reached."""
    out = SyncResult()
    folder = Path(spool_dir)
    transport = Transport(url, token)
    try:
        for path in sorted(folder.glob("*.jsonl")):
            if path.name.endswith(".rejected.jsonl"):
                continue
            spool = Spool(path)
            out[path.stem] = spool.replay(transport)
            out.torn += spool.torn
        for path in sorted(folder.glob("*.rejected.jsonl")):
            for entry in RejectedLog(path).retry(transport):
                out.refused.append({**entry, "file": str(path)})
    except Unreachable as exc:
        raise ConnectionError(f"cannot reach the tracker at {url} ({exc}); the spool in {spool_dir} is kept") from None
    finally:
        transport.close()
    return out
