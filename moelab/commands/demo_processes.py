"""The processes `moelab demo` starts, recorded so that `moelab demo --stop` stops exactly those.

Why not `ray stop` and `pkill -f "moelab tracker serve"`: both match every such process of the
user (another checkout's tracker, a Ray cluster a notebook or a test started), not the ones the
demo started. Here each process is started as the leader of a new session, so its process group
holds what it spawns (`ray start --block` keeps the Ray head's GCS server, raylet, dashboard and
workers in its group), and is recorded in `runs/demo-processes.json` with its pid and its start
time in clock ticks since boot (field 22 of `/proc/<pid>/stat`). Stopping one sends SIGTERM to
the leader (`ray start --block` then drains and stops its head; uvicorn finishes its requests),
waits, and sends SIGKILL to what is left of the group. A pid the kernel has since given to another
process has another start time and is left alone, as is any process that started before the
record (it cannot belong to the recorded group). Reading `/proc` makes this Linux-only; without it
a recorded process cannot be told from a reused pid, so it is reported and left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from shared.data.atomic import atomic_write_json

RECORD_FILE = Path("runs") / "demo-processes.json"
GONE = ("Z", "X")  # a zombie (exited, not yet reaped) or a dead task: nothing left to stop


@dataclass(frozen=True)
class RecordedProcess:
    name: str
    pid: int
    started: int  # clock ticks since boot: with the pid, what identifies the process
    argv: list[str]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time) of a live or zombie process; None when there is none."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the command name in parentheses may hold spaces
    return fields[0], int(fields[2]), int(fields[19])


def _group(rec: RecordedProcess) -> list[int]:
    """The running members of the recorded process's group that started no earlier than it did."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            state, pgrp, started = st
            if pgrp == rec.pid and state not in GONE and started >= rec.started:
                members.append(int(entry.name))
    return members


def read_records(record_file: Path) -> dict[str, RecordedProcess]:
    if not record_file.is_file():
        return {}
    return {name: RecordedProcess(**r) for name, r in json.loads(record_file.read_text()).items()}


def start_recorded(record_file: Path, name: str, argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """Start `argv` as the leader of its own session (no terminal, stdin from /dev/null unless given)
    and record it under `name`, replacing an earlier record of that name."""
    proc = subprocess.Popen(argv, start_new_session=True, **{"stdin": subprocess.DEVNULL, **popen_kwargs})
    st = _stat(proc.pid)
    records = read_records(record_file)
    records[name] = RecordedProcess(name, proc.pid, st[2] if st else -1, list(argv))
    atomic_write_json(record_file, {k: asdict(r) for k, r in records.items()})
    return proc


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_for_group(rec: RecordedProcess, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _group(rec)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def stop_recorded_process(rec: RecordedProcess, grace_s: float = 30.0) -> tuple[str, bool]:
    """Stop one recorded process and its group; returns what happened, in words, and whether the
    record is done with (False: something of it may still run)."""
    if not Path("/proc/self/stat").is_file() or rec.started < 0:
        return f"{rec.name}: pid {rec.pid} cannot be verified without /proc; left running", False
    leader = _stat(rec.pid)
    if leader is not None and leader[0] not in GONE and leader[2] != rec.started:
        return f"{rec.name}: pid {rec.pid} now belongs to another process; left alone", True
    members = _group(rec)
    if not members:
        return f"{rec.name}: not running (pid {rec.pid})", True
    _signal([rec.pid] if rec.pid in members else members, signal.SIGTERM)
    left = _wait_for_group(rec, grace_s)
    if not left:
        return f"{rec.name}: stopped (pid {rec.pid}, {len(members)} process(es))", True
    _signal(left, signal.SIGKILL)
    left = _wait_for_group(rec, 5.0)
    return f"{rec.name}: killed after {grace_s:.0f} s (pid {rec.pid}; {len(left)} still running)", not left


def stop_recorded(record_file: Path, grace_s: float = 30.0) -> list[str]:
    """Stop every process `record_file` lists; returns one line per process. The record keeps only
    what may still be running (and is removed when nothing is)."""
    lines, kept = [], {}
    for name, rec in read_records(record_file).items():
        line, done = stop_recorded_process(rec, grace_s)
        lines.append(line)
        if not done:
            kept[name] = asdict(rec)
    if kept:
        atomic_write_json(record_file, kept)
    else:
        record_file.unlink(missing_ok=True)
    return lines
