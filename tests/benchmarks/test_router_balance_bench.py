"""Smoke test of benchmarks/router_balance.py: the quick run trains its arms and reports each one."""

from __future__ import annotations

import math

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_router_balance_quick_reports_every_arm_with_its_overrides() -> None:
    result = run_benchmark("router_balance.py", "--quick")
    assert list(result["arms"]) == ["shipped_deepseek", "lr_3e-2"]
    for row in result["arms"].values():
        assert 0.0 <= row["maxvio_last_half"] <= 3.0 and row["maxvio_peak_last_half"] >= row["maxvio_last_half"]
        assert math.isfinite(row["eval_loss"]) and row["router_warnings"] >= 0
        # the frozen final model on 131k unseen training-stream tokens, beside its floor on them
        assert 0.0 <= row["frozen_maxvio"] <= 3.0 and 0.0 < row["frozen_floor"] < 0.5
        # the last JSON line leaves out the per-run records (they stay in the result file)
        assert math.isfinite(row["frozen_ratio_to_floor"]) and row["frozen_ratio_to_floor"] > 0 and "runs" not in row
    assert "optim.lr=0.03" in result["arms"]["lr_3e-2"]["overrides"]
    assert result["steps"] == 30 and result["defaults"]["bias_update_rule"] == "error"
    assert result["frozen_tokens"] == 131072 and result["ranked_by"] == "frozen_maxvio"
