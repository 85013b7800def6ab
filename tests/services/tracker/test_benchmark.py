"""benchmarks/tracker.py runs end to end in quick mode, and counts only points its server really holds."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from tests.benchmark_run import run_benchmark

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "tracker.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_tracker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_server_that_refuses_the_points_fails_the_load(server, tmp_path, monkeypatch):
    from services.tracker import routes_data
    from services.tracker.validation import parse_batch

    def refuses_loss(raw):
        batch, refused = parse_batch(raw)
        refused += [{"item": "metrics.loss", "error": "refused for the test"}] if "loss" in batch.metrics else []
        return batch.model_copy(update={"metrics": {k: v for k, v in batch.metrics.items() if k != "loss"}}), refused

    monkeypatch.setattr(routes_data, "parse_batch", refuses_loss)
    bench = _bench()
    res = bench.load_ours(server.url, server.token, 2, 50, str(tmp_path / "spool"))
    assert len(res["errors"]) == 2 and "NOT fully delivered" in res["errors"][0]
    stored = bench.count_ours(server.url, res["runs"])
    assert stored == 2 * 50 * 3  # lr, grad_norm, tokens_per_s landed; loss did not
    with pytest.raises(bench.NotStored, match="holds 300 of the 400 points"):
        bench.require_stored("ours", stored, res["points"])


def test_a_server_that_acknowledges_without_storing_is_caught_by_the_count(server, tmp_path, monkeypatch):
    def lying_ingest(run_id, batch, refused=None):
        return {"stored": True, "duplicate": False, "points": 0}

    monkeypatch.setattr(server.store, "ingest", lying_ingest)
    bench = _bench()
    res = bench.load_ours(server.url, server.token, 1, 20, str(tmp_path / "spool"))
    assert res["errors"] == []  # the client believes every point was delivered
    with pytest.raises(bench.NotStored, match="holds 0 of the 80 points"):
        bench.require_stored("ours", bench.count_ours(server.url, res["runs"]), res["points"])


def test_a_server_that_stores_everything_passes_the_count(server, tmp_path):
    bench = _bench()
    res = bench.load_ours(server.url, server.token, 2, 30, str(tmp_path / "spool"))
    assert res["errors"] == []
    bench.require_stored("ours", bench.count_ours(server.url, res["runs"]), res["points"])


def test_interleaved_rounds_rotate_the_order():
    order = []
    bench = _bench()
    bench.interleaved({n: (lambda n=n: order.append(n) or n) for n in "abc"}, 3)
    assert order == list("abc" "bca" "cab")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_tracker_benchmark_quick_prints_ratio_and_query_ms():
    result = run_benchmark("tracker.py", "--quick", timeout=1700)
    assert result["ratio"] > 0 and result["ratio_async"] > 0 and result["query_ms"] > 0
    assert result["clients"] == 8 and result["series_points"] > 0 and result["points_per_request"] == 1000
    assert result["pages"].get("runs_list_ms", 0) > 0 and result["pages"].get("run_page_ms", 0) > 0
    by_round = result["points_per_s_by_round"]
    assert sorted(by_round) == ["mlflow", "mlflow_async", "ours"] and all(len(v) == result["rounds"] for v in by_round.values())
    assert abs(statistics.median(by_round["ours"]) - result["ingest_points_per_s"]) <= 1
