"""benchmarks/moe_layer.py runs in quick mode and ends with its JSON line (ratio, ratio_torchtitan)."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_moe_layer_benchmark_quick_prints_ratios():
    result = run_benchmark("moe_layer.py", "--quick")
    assert result["ratio"] > 0 and result["ratio_mkl"] > 0 and result["ratio_unfused"] > 0
    assert "ratio_torchtitan" in result
    assert result["hf_fastest"] in ("grouped_mm", "eager")
    best = result[f"hf_{result['hf_fastest']}_s"]
    assert result["ratio"] == pytest.approx(best / result["ours_s"])
    assert result["ours_path"] == "loop"  # the quick shape's expert GEMMs are too small to fuse


@pytest.mark.gpu
@pytest.mark.slow
def test_moe_layer_benchmark_gpu_mode_reports_tokens_per_s():
    result = run_benchmark("moe_layer.py", "--gpu", "--repeats", "3")
    assert result["grouped_mm_tokens_per_s"] > 0 and result["triton_tokens_per_s"] > 0
