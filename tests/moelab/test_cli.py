"""The `moelab` command line: help, config show/check and its error path."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from moelab.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "config", "demo"):
        assert command in result.output


def test_config_show_prints_the_resolved_config():
    result = runner.invoke(app, ["config", "show", str(ROOT / "configs/tiny.yaml"), "model.moe.top_k=3"])
    assert result.exit_code == 0, result.output
    assert "top_k: 3" in result.output


def test_config_check_fails_with_exit_2_and_names_the_field():
    result = runner.invoke(app, ["config", "check", str(ROOT / "configs/tiny.yaml"), "model.moe.top_k=99"])
    assert result.exit_code == 2
    assert "model.moe" in result.output and "top_k" in result.output
