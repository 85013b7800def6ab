"""Smoke tests of benchmarks/cpu_gemm.py and benchmarks/expert_fusion.py: quick runs end with their JSON."""

from __future__ import annotations

from tests.benchmark_run import run_benchmark


def test_cpu_gemm_quick_reports_both_libraries_per_shape():
    result = run_benchmark("cpu_gemm.py", "--quick", timeout=300)
    assert result["ratio"] > 0 and result["library"] in ("onednn", "mkl")
    assert len(result["gflops"]) == 6
    assert all(v["torch.mm"] > 0 and v["mm_nt"] > 0 for v in result["gflops"].values())


def test_expert_fusion_quick_reports_speedups_and_autos_choice():
    result = run_benchmark("expert_fusion.py", "--quick", timeout=300)
    assert result["shapes"] == len(result["speedups"]) == 2
    assert all(s > 0 for s in result["speedups"].values())
    assert 0 <= result["auto_right"] <= result["shapes"]
    assert result["ratio"] is None  # auto fuses neither quick shape: their expert GEMMs are tiny

