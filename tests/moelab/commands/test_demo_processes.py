"""`moelab demo --stop` stops the process groups the demo recorded and nothing else: not a process
with the same command line (what `pkill -f` would also have hit), not a pid the kernel reused."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from moelab.commands.demo_processes import (
    GONE,
    RECORD_FILE,
    RecordedProcess,
    _stat,
    read_records,
    start_recorded,
    stop_recorded,
)
from shared.data.atomic import atomic_write_json

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process identity is read from /proc (Linux)")

# A stand-in for `ray start --block`: a parent that starts a child and, on SIGTERM, ends it and exits.
# The trailing words make its command line match `pkill -f "moelab tracker serve"`. It installs its
# handler before it prints the child's pid (the tests' cue to stop it): the other way round, a
# SIGTERM arriving in between, which a loaded CI machine made happen, killed the parent by the
# default action and left its child for the SIGKILL after the grace period.
PARENT = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
def stop(*_):
    child.terminate(); child.wait(); sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print(child.pid, flush=True)
time.sleep(600)
"""
# A parent that exits on SIGTERM and leaves its child running: only the SIGKILL after the grace period ends it.
DESERTER = PARENT.replace("child.terminate(); child.wait(); sys.exit(0)", "sys.exit(0)")
SAME_PATTERN = ["moelab", "tracker", "serve"]


def _running(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in GONE


def _child_pid(proc: subprocess.Popen) -> int:
    return int(proc.stdout.readline())


@pytest.fixture
def unrelated():
    """A process the demo did not start, with the same command line as the recorded one."""
    proc = subprocess.Popen([sys.executable, "-c", PARENT, *SAME_PATTERN], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = _child_pid(proc)
    yield proc, child
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_stop_ends_the_recorded_group_and_leaves_a_process_with_the_same_command_line(tmp_path, monkeypatch, unrelated):
    monkeypatch.chdir(tmp_path)
    recorded = start_recorded(RECORD_FILE, "tracker", [sys.executable, "-c", PARENT, *SAME_PATTERN],
                              stdout=subprocess.PIPE, text=True)
    child = _child_pid(recorded)
    assert read_records(RECORD_FILE)["tracker"].pid == recorded.pid
    result = CliRunner().invoke(app, ["demo", "--stop"])
    assert result.exit_code == 0, result.output
    assert f"tracker: stopped (pid {recorded.pid}, 2 process(es))" in result.output
    assert recorded.wait(timeout=10) == 0 and not _running(child)
    other, other_child = unrelated
    assert other.poll() is None and _running(other_child)
    assert not RECORD_FILE.exists()


def test_what_is_left_of_the_group_after_the_grace_period_is_killed(tmp_path):
    record = tmp_path / RECORD_FILE
    recorded = start_recorded(record, "ray-head", [sys.executable, "-c", DESERTER], stdout=subprocess.PIPE, text=True)
    child = _child_pid(recorded)
    t0 = time.monotonic()
    lines = stop_recorded(record, grace_s=1.0)
    assert lines == [f"ray-head: killed after 1 s (pid {recorded.pid}; 0 still running)"]
    assert time.monotonic() - t0 >= 1.0 and not _running(child)
    recorded.wait(timeout=10)


def test_a_recorded_pid_that_now_belongs_to_another_process_is_left_alone(tmp_path, unrelated):
    other, other_child = unrelated
    record = tmp_path / RECORD_FILE
    reused = RecordedProcess("tracker", other.pid, _stat(other.pid)[2] - 1, ["moelab", "tracker", "serve"])
    atomic_write_json(record, {"tracker": asdict(reused)})
    assert stop_recorded(record) == [f"tracker: pid {other.pid} now belongs to another process; left alone"]
    assert other.poll() is None and _running(other_child) and not record.exists()


def test_stop_with_nothing_recorded_stops_nothing_and_says_so(tmp_path, monkeypatch, unrelated):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["demo", "--stop"])
    assert result.exit_code == 0 and "nothing to stop" in result.output
    assert unrelated[0].poll() is None
