"""benchmarks/lm_head_loss.py runs in quick mode, checks agreement and ends with its JSON line."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_lm_head_loss_quick_prints_a_ratio_per_shape():
    result = run_benchmark("lm_head_loss.py", "--quick")
    (row,) = result["shapes"].values()
    assert row["ratio"] == pytest.approx(row["plain_ms"] / row["ours_ms"], rel=1e-2)
    assert result["ratio"] == pytest.approx(row["ratio"], rel=1e-3) and result["quick"]
    assert result["machine"]["cpu"]
