"""The demo's services for real: `moelab demo --stop` ends the Ray head and tracker the demo started,
and a Ray cluster and a tracker it did not start (what `ray stop` and `pkill -f` also hit) keep running."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from moelab.commands.demo import RayHead, _http_ok, _takes_writes, _token, ensure_ray, ensure_tracker
from moelab.commands.demo_processes import GONE, RECORD_FILE, _group, _stat, read_records, stop_recorded
from shared.net import free_port

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="process identity is read from /proc (Linux)")


def _wait_healthy(url: str, seconds: float = 120.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _http_ok(f"{url}/healthz"):
            return True
        time.sleep(0.5)
    return False


@pytest.fixture
def other_tracker(tmp_path):
    """A tracker someone else started: same command line as the demo's, another folder and port."""
    folder, port = tmp_path / "elsewhere", free_port()
    folder.mkdir()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moelab")), "tracker", "serve", "--port", str(port)],
                            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    yield proc, f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def test_demo_stop_ends_the_head_and_tracker_it_started_and_nothing_else(tmp_path, monkeypatch, ray_local, other_tracker):
    monkeypatch.chdir(tmp_path)
    record = tmp_path / RECORD_FILE
    # Ray's session sockets live under the temp dir and a socket path must stay under 108 bytes
    head = RayHead(temp_dir=tempfile.mkdtemp(prefix="mlr-", dir="/tmp"), dashboard_port=free_port(),
                   gcs_port=free_port(), agent_port=free_port(), client_port=free_port())
    try:
        ensure_ray(tmp_path, 1, head)
        url = ensure_tracker(tmp_path, free_port())
        other, other_url = other_tracker
        assert _wait_healthy(other_url)
        records = read_records(record)
        assert set(records) == {"ray-head", "tracker"}
        head_processes = {pid: _stat(pid)[2] for pid in _group(records["ray-head"])}  # pid -> start time
        assert len(head_processes) >= 4, head_processes  # ray start, GCS, raylet, dashboard, ...

        result = CliRunner().invoke(app, ["demo", "--stop"])
        assert result.exit_code == 0, result.output
        assert f"ray-head: stopped (pid {records['ray-head'].pid}" in result.output
        assert f"tracker: stopped (pid {records['tracker'].pid}" in result.output
        assert not any((st := _stat(pid)) is not None and st[0] not in GONE and st[2] == started
                       for pid, started in head_processes.items())  # the same start time: not a reused pid
        assert not _http_ok(f"{head.dashboard}/api/version") and not _http_ok(f"{url}/healthz")
        assert not record.exists()

        assert other.poll() is None and _http_ok(f"{other_url}/healthz")
        assert ray_local.get(ray_local.remote(lambda: 41 + 1).remote()) == 42
    finally:
        stop_recorded(record, grace_s=10.0)
        shutil.rmtree(head.temp_dir, ignore_errors=True)


def test_a_tracker_another_checkout_started_is_left_alone_and_the_demo_starts_its_own(tmp_path, monkeypatch, other_tracker):
    """The other server answers on the demo's port with its own tokens: the demo's runs would be
    refused and spooled, so the demo must not report to it."""
    monkeypatch.delenv("MOELAB_TRACKER_TOKEN", raising=False)
    shutil.copytree(Path(__file__).resolve().parents[3] / "configs", tmp_path / "configs")
    other, other_url = other_tracker
    assert _wait_healthy(other_url)
    other_port = int(other_url.rsplit(":", 1)[1])
    try:
        url = ensure_tracker(tmp_path, other_port)
        assert url != other_url and int(url.rsplit(":", 1)[1]) > other_port
        assert _takes_writes(url, _token(tmp_path))
        assert not _takes_writes(other_url, _token(tmp_path))
        assert ensure_tracker(tmp_path, other_port) == url  # the next demo finds its own server again
        assert other.poll() is None
    finally:
        stop_recorded(tmp_path / RECORD_FILE, grace_s=10.0)
