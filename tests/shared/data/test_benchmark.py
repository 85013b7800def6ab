"""`benchmarks/tokenize.py --quick` runs end to end and ends with its JSON line."""

from __future__ import annotations

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_tokenize_benchmark_quick_prints_overhead_json():
    result = run_benchmark("tokenize.py", "--quick", "--mb", "0.3")
    assert {"overhead", "raw_tokens_per_s", "shard_tokens_per_s", "tokens"} <= set(result)
    assert result["tokens"] > 10_000 and result["raw_tokens_per_s"] > 0 and result["shard_tokens_per_s"] > 0
    assert result["overhead"] == pytest.approx(result["raw_tokens_per_s"] / result["shard_tokens_per_s"] - 1, rel=1e-2, abs=1e-3)
