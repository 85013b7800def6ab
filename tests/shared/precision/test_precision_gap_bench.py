"""The precision-gap benchmark runs end to end in quick mode and ends with its JSON line."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_precision_gap_quick_run_prints_the_gaps_as_its_last_line(tmp_path):
    out = tmp_path / "gap.json"
    result = run_benchmark("precision_gap.py", "--quick", "--no-progress", "--out", str(out), timeout=900)
    for key in ("fp8_gap", "nvfp4_gap", "fp8_gap_no_recipe", "nvfp4_gap_no_recipe"):
        assert isinstance(result[key], float) and abs(result[key]) < 1.0, key
    assert result["all_finite"] and result["quick"]
    assert result["tokens_per_step"] == 256  # the small batch the experiment is about: 4 × 64, one micro-batch
    assert json.loads(out.read_text()) == result
