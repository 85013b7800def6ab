"""Bytes per parameter per precision mode, and the `moelab precision-report` table."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from shared.precision.memory import bytes_per_param, lowp_copy_bytes


def test_bytes_per_param_follow_the_accounting_rules():
    assert bytes_per_param("bf16", "fp32", "adamw").total == 4 + 4 + 8 + 2
    assert bytes_per_param("bf16", "bf16", "muon").total == 2 + 2 + 2 + 0
    assert bytes_per_param("fp8", "fp32", "muon", "tensor").lowp_copies == 2.0  # two 1-byte layouts
    assert lowp_copy_bytes("fp8", "bf16", "mxfp8") == pytest.approx(2 * (1 + 1 / 32))
    assert lowp_copy_bytes("nvfp4", "bf16") == pytest.approx(2 * (0.5 + 1 / 16))


def test_precision_report_prints_every_mode_for_a_recipe():
    result = CliRunner().invoke(app, ["precision-report", "configs/tiny.yaml"])
    assert result.exit_code == 0, result.output
    for mode in ("bf16", "fp8", "nvfp4"):
        assert f"| {mode}" in result.output
    assert "bf16 * | fp32" in result.output
