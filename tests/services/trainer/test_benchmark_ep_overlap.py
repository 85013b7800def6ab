"""Smoke test of benchmarks/ep_overlap.py: the quick run times EP with and without the overlapped
all-to-all over 2 gloo processes and its last line is the result JSON."""

from __future__ import annotations

import math

import pytest

from tests.benchmark_run import run_benchmark


def test_ep_overlap_benchmark_quick_prints_both_times_and_ratio() -> None:
    result = run_benchmark("ep_overlap.py", "--quick")
    for name in ("step", "layer"):
        for variant in ("no_overlap", "halves", "overlap"):
            seconds = result[f"{name}_s_{variant}"]
            assert seconds > 0 and math.isfinite(seconds)
        assert result[f"{name}_blocked_s_overlap"] >= 0 and result[f"{name}_a2a_s"] > 0
    assert result["ratio"] == pytest.approx(result["step_s_no_overlap"] / result["step_s_overlap"])
    assert result["layer_ratio"] == pytest.approx(result["layer_s_no_overlap"] / result["layer_s_overlap"])
