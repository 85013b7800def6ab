"""benchmarks/scorer.py runs in quick mode and ends with the JSON line the issue names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_scorer_benchmark_quick_prints_flops_saved_and_keeper_loss():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scorer.py"), "--quick"], capture_output=True,
                         text=True, timeout=1500, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    last = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0.0 <= last["flops_saved"] < 1.0 and 0.0 <= last["keeper_loss"] <= 1.0
    assert last["ratio"] > 0 and last["actors_1_docs_per_s"] > 0 and last["actors_2_docs_per_s"] > 0
