"""The sweep runner: one result file per trial, keyed by config hash; a rerun trains only what is missing."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from services.trainer.hparam.analysis import lr_drift, optimal_lrs, sweep_table
from services.trainer.hparam.proxy import proxy_config, tokens_per_step
from services.trainer.hparam.sweep import Trial, TrialResult, run_sweep, trial_config
from services.trainer.loop import TrainingStopped
from shared.config import load_config

ROOT = Path(__file__).resolve().parents[4]


def _cfg():
    return load_config(ROOT / "configs" / "tiny.yaml", ["tracker.mode=disabled"])


def counting_train(cfg):
    """Test double for the trainer: loss is a parabola in ln(lr) whose optimum shrinks as 1/width
    (SP-like) unless muP is on; every call appends the run name to a counter file beside the runs."""
    counter = Path(cfg.train.out_dir) / "trainings.txt"
    counter.parent.mkdir(parents=True, exist_ok=True)
    with counter.open("a") as f:
        f.write(cfg.train.run_name + "\n")
    (counter.parent / "cwd.txt").write_text(os.getcwd())
    width, lr = cfg.model.d_model, cfg.optim.lr
    best = 4e-3 if cfg.model.mup.enabled else 4e-3 * 64 / width
    if lr > 50 * best:
        raise TrainingStopped("5 consecutive non-finite steps")
    return {"loss": 3.0 + 0.2 * math.log(lr / best) ** 2 + 0.1, "eval/loss": 3.0 + 0.2 * math.log(lr / best) ** 2}


def _count(results_dir: Path) -> list[str]:
    path = results_dir / "runs" / "trainings.txt"
    return path.read_text().split() if path.exists() else []


def test_trial_key_depends_on_the_trial_not_on_where_it_runs(tmp_path):
    cfg = _cfg()
    k1, c1 = trial_config(cfg, Trial(64, True, 1e-3), tmp_path / "a")
    k2, _ = trial_config(cfg, Trial(64, True, 1e-3), tmp_path / "b")
    k3, _ = trial_config(cfg, Trial(64, True, 2e-3), tmp_path / "a")
    assert k1 == k2 != k3
    assert c1.train.run_name == f"trial-{k1}" and c1.optim.lr == 1e-3


def test_trial_key_of_a_sweep_with_its_own_corpus_does_not_depend_on_where_the_folder_is(tmp_path):
    """`--pydoc-corpus` writes the documents under the results folder: the same sweep in another
    folder (copied, committed) gets the same keys, so it resumes; another corpus does not."""
    from services.trainer.hparam.corpus import pydoc_corpus_overrides

    keys = []
    for folder in (tmp_path / "a", tmp_path / "deeper" / "b"):
        cfg = load_config(ROOT / "configs" / "tiny.yaml", [*pydoc_corpus_overrides(folder / "corpus"), "tracker.mode=disabled"])
        keys.append(trial_config(cfg, Trial(64, True, 1e-3), folder)[0])
    elsewhere = load_config(ROOT / "configs" / "tiny.yaml", [*pydoc_corpus_overrides(tmp_path / "other" / "corpus"), "tracker.mode=disabled"])
    assert keys[0] == keys[1] != trial_config(elsewhere, Trial(64, True, 1e-3), tmp_path / "a")[0]


def test_proxy_config_scales_width_by_heads_and_budget_by_steps():
    cfg = _cfg()
    p = proxy_config(cfg, width=128, mup=False, tokens=tokens_per_step(cfg) * 50)
    assert p.model.d_model == 128 and p.model.resolved_head_dim == cfg.model.resolved_head_dim
    assert p.model.n_heads == 2 * cfg.model.n_heads and p.model.moe.expert_hidden == 2 * cfg.model.moe.expert_hidden
    assert p.model.mup.enabled is False and p.train.steps == 50
    assert p.optim.warmup_steps == round(cfg.optim.warmup_steps / cfg.train.steps * 50)
    with pytest.raises(ValueError, match="head width"):
        proxy_config(cfg, width=72)


@pytest.mark.slow  # Ray Tune start-up: ~15 s on an idle 2-core machine, minutes when it is shared
def test_tune_sweep_resumes_without_retraining_finished_trials(tmp_path, ray_local):
    cfg = _cfg()
    trials = [Trial(w, True, lr) for w in (64, 128) for lr in (1e-3, 4e-3)]
    first = run_sweep(cfg, trials[:2], tmp_path, train_fn=counting_train, cpus_per_trial=0.5)
    assert len(first.results) == 2 and not first.failed and len(_count(tmp_path)) == 2

    second = run_sweep(cfg, trials, tmp_path, train_fn=counting_train, cpus_per_trial=0.5)
    trained = _count(tmp_path)
    assert len(trained) == 4 and len(set(trained)) == 4  # 2 new trainings, none repeated
    assert sorted(second.trained) == sorted(r.key for r in second.results if r not in first.results)
    assert {r.key: r.loss for r in first.results}.items() <= {r.key: r.loss for r in second.results}.items()
    assert (tmp_path / "runs" / "cwd.txt").read_text() == os.getcwd()  # relative recipe paths mean the same dir


def test_partial_sweep_resumes_without_retraining_finished_trials(tmp_path):
    cfg = _cfg()
    trials = [Trial(w, mup, lr) for mup in (True, False) for w in (64, 128) for lr in (1e-3, 4e-3, 1.6e-2)]
    first = run_sweep(cfg, trials[:5], tmp_path, train_fn=counting_train, use_ray=False)
    assert len(first.results) == 5 and len(_count(tmp_path)) == 5
    (tmp_path / "trials" / f"{first.results[0].key}.json").write_text("{truncated")  # a half-written file
    second = run_sweep(cfg, trials, tmp_path, train_fn=counting_train, use_ray=False)
    trained = _count(tmp_path)
    assert len(second.trained) == 8 and len(second.results) == 12  # 7 new + the unreadable one
    assert len(trained) == 13 and trained.count(f"trial-{first.results[0].key}") == 2
    third = run_sweep(cfg, trials, tmp_path, train_fn=counting_train, use_ray=False)
    assert third.trained == [] and len(_count(tmp_path)) == 13


def test_in_process_sweep_records_divergence_and_finds_lr_drift(tmp_path):
    cfg = _cfg()
    lrs = [4e-3 * 2**k for k in range(-3, 4)] + [1.0]
    trials = [Trial(w, mup, lr) for mup in (True, False) for w in (64, 128, 256) for lr in lrs]
    out = run_sweep(cfg, trials, tmp_path, train_fn=counting_train, use_ray=False)
    diverged = [r for r in out.results if r.diverged]
    assert diverged and all(r.lr == 1.0 and math.isinf(r.loss) for r in diverged)
    assert all(r.loss == r.eval_loss for r in out.results if not r.diverged)  # ranked by held-out loss
    drifts = {d.mup: d for d in lr_drift(optimal_lrs(out.results))}
    assert abs(drifts[True].slope) < 0.05  # muP: lr* stays put
    assert drifts[False].slope == pytest.approx(-1.0, abs=0.05)  # SP: lr* ∝ 1/width
    table = sweep_table(out.results)
    assert "diverged" in table and "| muP | 64 |" in table


def test_sweep_table_shows_each_lrs_mean_over_its_seeds():
    def result(lr, seed, loss):
        return TrialResult(key=f"{lr}-{seed}", width=32, mup=True, lr=lr, tokens=100, steps=2, loss=loss,
                           train_loss=loss, eval_loss=loss, diverged=False, seed=seed)

    grid = {0.01: (4.0, 4.2), 0.02: (3.0, 3.4), 0.04: (3.9, 3.7)}
    table = sweep_table([result(lr, s, loss) for lr, losses in grid.items() for s, loss in enumerate(losses)])
    row = next(line for line in table.splitlines() if line.startswith("| 100 |"))
    assert "| 2 | 4.1000 | **3.2000** | 3.8000 |" in row
