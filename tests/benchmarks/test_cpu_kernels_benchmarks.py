"""Smoke tests of benchmarks/cpu_gemm.py and benchmarks/expert_fusion.py: quick runs end with their JSON."""

from __future__ import annotations

from tests.benchmark_run import run_benchmark


def _has_machine_line(result: dict) -> None:
    machine = result["machine"]
    assert machine["cpu"] and isinstance(machine["isa_flags"], list)
    assert "code path" in machine["blas"]["mkl"] and machine["blas"]["onednn"].startswith("oneDNN")


def test_cpu_gemm_quick_reports_both_libraries_and_the_autotuned_choice_per_shape():
    result = run_benchmark("cpu_gemm.py", "--quick", timeout=300)
    assert result["ratio"] > 0 and result["ratio_onednn"] > 0
    assert len(result["gflops"]) == len(result["library"]) == 6
    assert all(v["torch.mm"] > 0 and v["onednn"] > 0 and v["mm_nt"] > 0 for v in result["gflops"].values())
    assert set(result["library"].values()) <= {"mkl", "onednn"}
    _has_machine_line(result)


def test_expert_fusion_quick_reports_fusion_and_concurrency_speedups_and_autos_choices():
    result = run_benchmark("expert_fusion.py", "--quick", timeout=300)
    assert result["shapes"] == len(result["speedups"]) == len(result["concurrency_speedups"]) == 2
    assert all(s > 0 for s in [*result["speedups"].values(), *result["concurrency_speedups"].values()])
    assert 0 <= result["auto_right"] <= result["shapes"] and 0 <= result["concurrency_right"] <= result["shapes"]
    assert result["ratio"] is None  # auto fuses neither quick shape: their expert GEMMs are tiny
    _has_machine_line(result)
