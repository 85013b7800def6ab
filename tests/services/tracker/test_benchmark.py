"""benchmarks/tracker.py runs end to end in quick mode and ends with its JSON line."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tracker_benchmark_quick_prints_ratio_and_query_ms():
    result = run_benchmark("tracker.py", "--quick", timeout=1700)
    assert result["ratio"] > 0 and result["query_ms"] > 0
    assert result["clients"] == 8 and result["series_points"] > 0
