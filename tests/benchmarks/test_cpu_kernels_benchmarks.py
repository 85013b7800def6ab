"""benchmarks/cpu_gemm.py and benchmarks/expert_fusion.py: quick runs end with their JSON, and the tuner's cached choice is graded on independent timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from tests.benchmark_run import REPO, run_benchmark


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


def test_expert_fusion_quick_reports_each_way_and_what_the_rules_and_the_tuner_pick(tmp_path, monkeypatch):
    monkeypatch.setenv("MOELAB_HOME", str(tmp_path))  # no cache: the tuner measures or leaves it to the rules
    result = run_benchmark("expert_fusion.py", "--quick", timeout=300)
    assert result["shapes"] == len(result["ms"]) == len(result["rules"]) == len(result["tuned"]) == 2
    ways = {"loop", "fused", "fused-concurrent"} if result["threads"] > 1 else {"loop", "fused"}
    for shape, times in result["ms"].items():
        assert set(times) == ways and all(t > 0 for t in times.values())
        assert result["rules"][shape] == "loop"  # quick shapes are below the fusing threshold
        assert result["tuned"][shape] in ways
        assert result["tuned_from"][shape] in {"measured", "rules"}
    assert 0 <= result["rules_right"] <= 2 and 0 <= result["tuned_right"] <= 2
    assert result["ratio"] > 0
    _has_machine_line(result)


def test_expert_fusion_grades_a_planted_wrong_cached_choice_as_a_miss_and_check_fails(tmp_path):
    """The cached way is what the model runs, so it is what gets graded, on timings made after it."""
    from shared.kernels import gemm_autotune
    from shared.kernels.expert_path_autotune import CACHE_FILE, CONFIRMATIONS, PathClass

    env = {**os.environ, "MOELAB_HOME": str(tmp_path)}
    threads = torch.get_num_threads()
    classes = {}
    for T, D, F, E, K in [(256, 64, 32, 8, 2), (256, 64, 32, 64, 2)]:
        cls = PathClass(T, D, F, E, K, threads)
        classes[cls.label] = {"class": asdict(cls), "way": "fused", "ms": {}, "confirmations": CONFIRMATIONS}
    key = gemm_autotune.machine_key()
    (tmp_path / CACHE_FILE).write_text(json.dumps(
        {"version": gemm_autotune.CACHE_VERSION, "machines": {key: {"fingerprint": {}, "classes": classes}}}))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "expert_fusion.py"), "--quick", "--check",
                           "--threads", str(threads)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tuned"] == dict.fromkeys(result["ms"], "fused")
    assert set(result["tuned_from"].values()) == {"cache"}
    # 64 experts of 8 rows each one after another: about twice the loop's time (1.9x on a loaded 2-core
    # machine), so far outside the grader's 5% tolerance that the planted choice must grade as a miss
    assert result["ms"]["T256_d64_F32_E64_K2"]["fused"] > 1.25 * result["ms"]["T256_d64_F32_E64_K2"]["loop"]
    assert result["tuned_right"] <= 1
    assert proc.returncode == 1 and "T256_d64_F32_E64_K2" in proc.stderr


def test_expert_fusion_grade_counts_hits_on_the_timings_given_not_the_tuners_own():
    from benchmarks.expert_fusion import grade

    times = {"a": {"loop": 1.0, "fused": 3.0}, "b": {"loop": 2.0, "fused": 1.0}}
    right = grade(times, rules={"a": "loop", "b": "loop"}, tuned={"a": "loop", "b": "fused"})
    assert (right["rules_right"], right["tuned_right"]) == (1, 2)
    assert right["ratio"] == pytest.approx(2.0**0.5)
    wrong = grade(times, rules={"a": "loop", "b": "loop"}, tuned={"a": "fused", "b": "loop"})
    assert wrong["tuned_right"] == 0 and wrong["ratio"] == pytest.approx(3.0**-0.5)
