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
    by_round = result["ratio_by_round"]
    assert len(by_round["rounds"]) == result["rounds"]
    assert by_round["q1"] <= by_round["median"] <= by_round["q3"]
    assert min(by_round["rounds"]) <= by_round["median"] <= max(by_round["rounds"])


def test_paired_ratios_are_the_peers_step_time_over_ours_round_by_round() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "train_step.py"
    spec = importlib.util.spec_from_file_location("train_step_bench", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    # ours twice as fast in round 0, equal in round 1, a loaded round 2 hitting both
    q = bench.paired_ratios({"ours": [1.0, 2.0, 4.0, 1.0], "peer": [2.0, 2.0, 6.0, 1.5]}, "ours", "peer")
    assert q["rounds"] == [2.0, 1.0, 1.5, 1.5]
    assert q["median"] == 1.5 and q["q1"] <= 1.5 <= q["q3"]
