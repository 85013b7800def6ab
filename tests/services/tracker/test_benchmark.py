"""benchmarks/tracker.py runs end to end in quick mode and ends with its JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tracker_benchmark_quick_prints_ratio_and_query_ms():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tracker.py"), "--quick"],
                         capture_output=True, text=True, timeout=1700, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ratio"] > 0 and result["query_ms"] > 0
    assert result["clients"] == 8 and result["series_points"] > 0
