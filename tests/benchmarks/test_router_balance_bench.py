"""Smoke test of benchmarks/router_balance.py: the quick run trains its arms and reports each one."""

from __future__ import annotations

import math

import pytest

from tests.benchmark_run import run_benchmark


@pytest.mark.slow
def test_router_balance_quick_reports_every_arm_with_its_overrides() -> None:
    result = run_benchmark("router_balance.py", "--quick")
    assert list(result["arms"]) == ["shipped_deepseek", "lr_3e-2"]
    for row in result["arms"].values():
        assert 0.0 <= row["maxvio_last_half"] <= 3.0 and row["maxvio_peak_last_half"] >= row["maxvio_last_half"]
        assert math.isfinite(row["eval_loss"]) and row["router_warnings"] >= 0
        # the frozen final model on 131k unseen training-stream tokens, beside its floor on them
        assert 0.0 <= row["frozen_maxvio"] <= 3.0 and 0.0 < row["frozen_floor"] < 0.5
        # the last JSON line leaves out the per-run records (they stay in the result file)
        assert math.isfinite(row["frozen_ratio_to_floor"]) and row["frozen_ratio_to_floor"] > 0 and "runs" not in row
    assert "optim.lr=0.03" in result["arms"]["lr_3e-2"]["overrides"]
    assert result["steps"] == 30 and result["defaults"]["bias_update_rule"] == "error"
    assert result["frozen_tokens"] == 131072 and result["ranked_by"] == "frozen_maxvio"
    # every arm paired seed by seed with the first (the baseline pairs with itself at 0), ranked among
    # the arms at the baseline's eval loss first
    base, other = result["arms"]["shipped_deepseek"], result["arms"]["lr_3e-2"]
    assert base["paired_seeds"] == [0] and base["paired_frozen_diff"] == [0.0] and base["equal_eval_loss"]
    assert other["paired_eval_loss_diff_mean"] == pytest.approx(other["eval_loss"] - base["eval_loss"])
    assert other["frozen_maxvio_range"] == [other["frozen_maxvio"]] * 2
    assert sorted(result["ranking"]) == sorted(result["arms"]) and result["baseline"] == "shipped_deepseek"
    assert result["commit"] and result["machine"]["threads_per_run"] == 1


def test_reuse_takes_only_runs_made_the_same_way(tmp_path) -> None:
    """`--reuse FILE`: a run is reused when arm, overrides, seed, recipe and steps match (and it was
    calibrated if this invocation calibrates); it keeps the commit it ran on."""
    import json

    from benchmarks.router_balance import reusable_runs

    def run(seed, calibrated=True):
        return {"seed": seed, "frozen": {"before": {}, **({"after": {}} if calibrated else {})}}

    old = {"recipe": "configs/tiny.yaml", "steps": 200, "commit": "abc1234",
           "arms": {"recipe": {"overrides": [], "runs": [run(0), run(1, calibrated=False)]},
                    "window": {"overrides": ["x=1"], "runs": [run(0)]}}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    got = reusable_runs(path, "configs/tiny.yaml", 200, [("recipe", []), ("window", ["x=2"])], calibrate=True,
                        calibration_tokens=(131072,))
    assert list(got) == [("recipe", 0)] and got[("recipe", 0)]["commit"] == "abc1234"
    assert set(reusable_runs(path, "configs/tiny.yaml", 200, [("recipe", [])], calibrate=False)) == {("recipe", 0), ("recipe", 1)}
    assert reusable_runs(path, "configs/tiny.yaml", 100, [("recipe", [])], calibrate=False) == {}
    # calibrated on other sample sizes: not the same run (an old file without the field calibrated on 131,072)
    assert reusable_runs(path, "configs/tiny.yaml", 200, [("recipe", [])], calibrate=True,
                         calibration_tokens=(131072, 262144)) == {}
    assert list(reusable_runs(path, "configs/tiny.yaml", 200, [("recipe", [])], calibrate=True,
                              calibration_tokens=(131072,))) == [("recipe", 0)]
    # the default calibrates as the recipes do (262,144 tokens), so a 131,072-token file is not reused
    assert reusable_runs(path, "configs/tiny.yaml", 200, [("recipe", [])], calibrate=True) == {}


@pytest.mark.parametrize("sizes", ["131072,131072", "lots", ""])
def test_calibration_sizes_that_cannot_be_compared_are_refused(sizes) -> None:
    from benchmarks.router_balance import main

    with pytest.raises(SystemExit) as exc:
        main(["--calibrate", "--calibration-tokens", sizes])
    assert exc.value.code == 2
