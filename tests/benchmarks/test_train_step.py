"""Smoke test of benchmarks/train_step.py: the quick run completes and its last line is the result JSON."""

from __future__ import annotations

import math

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_train_step_quick_prints_ratios() -> None:
    result = run_benchmark("train_step.py", "--quick")
    tps = result["tokens_per_s"]
    assert {"ours", "ours[mkl]", "hf[grouped_mm]", "hf[eager]", "torchtitan"} <= set(tps)
    assert all(v > 0 and math.isfinite(v) for v in tps.values())
    assert result["hf_fastest"] == max((k for k in tps if k.startswith("hf[")), key=tps.get)
    assert result["ratio"] == pytest.approx(tps["ours"] / tps[result["hf_fastest"]])
    assert result["ratio_torchtitan"] == pytest.approx(tps["ours"] / tps["torchtitan"])
    assert result["ratio_same_backend"] == pytest.approx(tps["ours[mkl]"] / tps[result["hf_fastest"]])
    assert result["ratio_torchtitan_same_backend"] == pytest.approx(tps["ours[mkl]"] / tps["torchtitan"])
    assert result["machine"]["cpu"] and "code path" in result["machine"]["blas"]["mkl"]
    calls = result["blas_calls"]
    assert calls["ours[mkl]"]["onednn_calls"] == 0 and all(c["mkl_calls"] > 0 for c in calls.values())
    assert result["ratio_fastest_step"] > 0 and result["ratio_torchtitan_fastest_step"] > 0
    counts = result["params"]
    assert all(abs(n - counts["ours"]) <= 0.01 * counts["ours"] for n in counts.values())
