"""`moelab demo` writes its own transcript: the commit, machine, threads and load beside every line
it printed and each stage's seconds, for finished and failed runs alike."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from moelab.cli import app
from moelab.commands import demo
from moelab.commands.demo_transcript import TRANSCRIPT

STAGES = {"filter": {"seconds": 31.6, "skipped": False}, "train": {"seconds": 0.0, "skipped": True}}


def _fake_run(lines, fail=False):
    def run(root, config, port, cpus, ablation, transcript):
        for line in lines:
            transcript.add(line + "\n")
        if fail:
            raise typer.Exit(code=1)
        transcript.stages = STAGES

    return run


def test_a_finished_demo_writes_commit_machine_load_lines_and_stage_times(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOELAB_COMMIT", "abc1234")
    monkeypatch.setattr(demo, "_run", _fake_run(["== filter: done in 31.6s", "train: 200 steps, loss 5.415"]))
    result = CliRunner().invoke(app, ["demo", "--cpus", "2"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / TRANSCRIPT).read_text()
    head, rest = text.split("\n\n", 1)
    assert "commit: abc1234" in head and "machine: " in head and " cores" in head
    assert "threads: torch " in head and "Ray CPUs 2" in head and "load average at start" in head
    assert rest.startswith("== filter: done in 31.6s\ntrain: 200 steps, loss 5.415\n")
    assert "stage filter: 31.6 s" in rest and "stage train: skipped" in rest
    assert "wall: " in rest and "load average at end" in rest and rest.endswith("outcome: finished\n")
    assert f"transcript: {tmp_path / TRANSCRIPT}" in result.output


def test_a_failed_demo_keeps_its_transcript_and_says_it_failed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "_run", _fake_run(["== filter: done in 31.6s"], fail=True))
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 1
    text = (tmp_path / TRANSCRIPT).read_text()
    assert "== filter: done in 31.6s" in text and text.endswith("outcome: failed (exit 1)\n")
