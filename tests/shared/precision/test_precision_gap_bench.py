"""The precision-gap benchmark runs end to end in quick mode and ends with its JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_precision_gap_quick_run_prints_the_gaps_as_its_last_line(tmp_path):
    out = tmp_path / "gap.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "precision_gap.py"), "--quick", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("fp8_gap", "nvfp4_gap", "fp8_gap_no_recipe", "nvfp4_gap_no_recipe"):
        assert isinstance(result[key], float) and abs(result[key]) < 1.0, key
    assert result["all_finite"] and result["quick"]
    assert json.loads(out.read_text()) == result
