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


@pytest.mark.slow
def test_a_rerun_reuses_finished_runs_and_gives_the_same_figures(tmp_path):
    args = ("--steps", "8", "--seeds", "1", "--no-ablations", "--no-harsh", "--tracker", "disabled",
            "--work-dir", str(tmp_path / "work"), "--set-lr", "recipe=0.03", "--set-lr", "no_recipe=0.004")
    first = run_benchmark("precision_gap.py", *args, "--out", str(tmp_path / "a.json"), timeout=900)
    kept = sorted(p.name for p in (tmp_path / "work" / "results").iterdir())
    assert kept == sorted(f"{m}-{s}-s0.json" for m in ("bf16", "fp8", "nvfp4") for s in ("recipe", "no_recipe"))
    stored = json.loads((tmp_path / "work" / "results" / "bf16-recipe-s0.json").read_text())["result"]
    losses = stored["curves"]["loss"]
    tail = [losses[k] for k in sorted(losses, key=int)][-1:]  # the last tenth of 8 steps: the last one
    assert stored["loss_tail"] == pytest.approx(sum(tail) / len(tail))
    assert first["arms"]["bf16-recipe"]["loss"] == pytest.approx(stored["loss_tail"])
    assert first["fp8_gap"] == pytest.approx(first["arms"]["fp8-recipe"]["loss"] - stored["loss_tail"], abs=1e-5)
    assert first["paired_gaps_by_seed"]["fp8-recipe"]["0"] == pytest.approx(first["fp8_gap"], abs=1e-5)
    assert first["commit"] and first["cores"] and "load_average_at_end" in first  # the result names its code and machine
    (tmp_path / "work" / "results" / "fp8-recipe-s0.json").unlink()  # as if interrupted during that run
    second = run_benchmark("precision_gap.py", *args, "--out", str(tmp_path / "b.json"), timeout=900)
    for r in (first, second):
        for k in ("wall_seconds", "train_seconds", "load_avg_1min", "load_average_at_end", "command"):
            r.pop(k)
    assert second == first and first["lr"] == {"recipe": 0.03, "no_recipe": 0.004}


def test_set_lr_names_a_known_setting():
    import subprocess
    import sys

    from tests.benchmark_run import REPO

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "precision_gap.py"), "--set-lr", "bungee=0.1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "the setting is one of recipe, no_recipe" in proc.stderr


def test_ablation_modes_are_known_formats_with_bf16_among_them():
    import subprocess
    import sys

    from tests.benchmark_run import REPO

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "precision_gap.py"), "--ablation-modes", "fp8,fp6"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--ablation-modes" in proc.stderr


def test_the_tuned_lr_is_the_best_loss_whose_routing_did_not_collapse():
    import importlib.util

    from tests.benchmark_run import REPO

    spec = importlib.util.spec_from_file_location("precision_gap", REPO / "benchmarks" / "precision_gap.py")
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    losses = {("recipe", 0.016): 6.45, ("recipe", 0.064): 6.44, ("no_recipe", 0.004): 6.3, ("no_recipe", 0.008): 6.2}
    maxvio = {("recipe", 0.016): 1.7, ("recipe", 0.064): 7.0, ("no_recipe", 0.004): 5.0, ("no_recipe", 0.008): 6.0}
    best, collapsed = pg.pick_lrs(losses, maxvio, ceiling=3.5)
    assert best == {"recipe": 0.016, "no_recipe": 0.008} and collapsed == ["no_recipe"]
    assert pg.collapse_maxvio() == 1.0  # the trainer's router-health line


def test_paired_gaps_read_each_arm_against_its_bf16_reference_seed_by_seed():
    from benchmarks.precision_gap import paired_gaps

    arms = {"bf16-recipe": {"loss_by_seed": {"0": 5.0, "1": 5.2}},
            "fp8-recipe": {"loss_by_seed": {"0": 5.01, "1": 5.23}},
            "bf16-no_recipe": {"loss_by_seed": {"0": 4.9, "1": 4.8}},
            "nvfp4_all_plain-no_recipe": {"loss_by_seed": {"0": 4.95, "1": 4.82}},
            "bf16-clip": {"loss_by_seed": {"0": 5.1, "1": 5.1}},
            "fp8-clip": {"loss_by_seed": {"0": 5.12, "1": 5.11}}}
    gaps = paired_gaps(arms)
    assert gaps["fp8-recipe"] == pytest.approx({"0": 0.01, "1": 0.03})
    assert gaps["nvfp4_all_plain-no_recipe"] == pytest.approx({"0": 0.05, "1": 0.02})
    assert gaps["bf16-clip"] == pytest.approx({"0": 0.1, "1": -0.1})  # an ablation against the recipe
    assert gaps["fp8-clip"] == pytest.approx({"0": 0.02, "1": 0.01})  # a low format against its own knob's bf16
    assert "bf16-recipe" not in gaps and "bf16-no_recipe" not in gaps
