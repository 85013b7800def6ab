"""benchmarks/cpu_attention.py runs in quick mode, checks agreement and ends with its JSON line."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_cpu_attention_quick_prints_the_ratio_against_flash():
    result = run_benchmark("cpu_attention.py", "--quick")
    (row,) = result["shapes"].values()
    assert row["ratio"] == pytest.approx(row["flash_ms"] / row["ours_ms"], rel=1e-2)
    assert row["ratio_math"] == pytest.approx(row["math_ms"] / row["ours_ms"], rel=1e-2)
    assert row["auto_takes_blocked"] and result["ratio"] == row["ratio"] and result["quick"]
    assert result["machine"]["cpu"]
