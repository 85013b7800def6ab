"""`benchmarks/attention.py --quick` runs end to end and ends with its JSON line."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tests.benchmark_run import run_benchmark

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.slow
def test_attention_benchmark_quick_prints_exponents_json():
    result = run_benchmark("attention.py", "--quick", "--kinds", "gqa", "swa", "kda")
    for key in ("swa_exponent", "kda_exponent", "full_exponent"):
        assert math.isfinite(result[key]), (key, result)
    assert result["full_exponent"] == result["gqa_exponent"]
    assert result["machine"]["cpu"] and "code path" in result["machine"]["blas"]["mkl"]
    for kind in ("gqa", "swa", "kda"):
        for T in (128, 256, 512):
            assert result[f"{kind}_ms_T{T}"] > 0 and result[f"{kind}_peak_mb_T{T}"] >= 0


def test_exponent_fit_recovers_known_powers():
    sys.path.insert(0, str(ROOT))
    from benchmarks.attention import fit_exponent

    lengths = [512, 1024, 2048, 4096]
    assert fit_exponent(lengths, [3e-9 * T**2 for T in lengths]) == pytest.approx(2.0)
    assert fit_exponent(lengths, [5e-6 * T for T in lengths]) == pytest.approx(1.0)
