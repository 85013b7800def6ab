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


def test_expert_fusion_quick_reports_each_way_and_what_the_rules_and_the_measurement_pick():
    result = run_benchmark("expert_fusion.py", "--quick", timeout=300)
    assert result["shapes"] == len(result["ms"]) == len(result["rules"]) == len(result["measured"]) == 2
    ways = {"loop", "fused", "fused-concurrent"} if result["threads"] > 1 else {"loop", "fused"}
    for shape, times in result["ms"].items():
        assert set(times) == ways and all(t > 0 for t in times.values())
        assert result["rules"][shape] == "loop"  # quick shapes are below the fusing threshold
        assert result["measured"][shape] in ways
    assert 0 <= result["rules_right"] <= 2 and 0 <= result["measured_right"] <= 2
    assert result["ratio"] >= 1.0  # the fastest way over the rules' pick
    _has_machine_line(result)
