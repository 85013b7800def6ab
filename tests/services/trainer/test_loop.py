"""The training loop in one process: loss falls, resume is bitwise, NaN steps are skipped and counted."""

from __future__ import annotations

import json

import pytest
import torch

from services.trainer.launch import run_local
from services.trainer.loop import TrainingStopped
from tests.services.trainer.conftest import tiny_cfg


def test_single_process_run_trains_evaluates_and_checkpoints(tmp_path, doc_globs):
    cfg = tiny_cfg(tmp_path, doc_globs, "train.steps=12", "train.checkpoint_every=6")
    result = run_local(cfg)
    assert result["steps"] == 12
    assert torch.isfinite(torch.tensor(result["loss"]))
    assert "eval/loss" in result and result["eval/loss"] < 7.0
    ckpts = sorted(p.name for p in (tmp_path / "runs" / "tiny" / "checkpoints").iterdir())
    assert ckpts == ["step_00000006", "step_00000012"]
    assert (tmp_path / "runs" / "tiny" / "config.yaml").is_file()


def test_resumed_run_matches_uninterrupted_run_bitwise(tmp_path, doc_globs):
    full = run_local(tiny_cfg(tmp_path / "a", doc_globs, "train.steps=6", "train.checkpoint_every=3"))
    # same run killed after step 3: train 3 steps (checkpoint at 3), then resume to 6
    part_cfg = tiny_cfg(tmp_path / "b", doc_globs, "train.steps=6", "train.checkpoint_every=3")
    stopped = part_cfg.model_copy(update={"train": part_cfg.train.model_copy(update={"steps": 3})})
    run_local(stopped)
    resumed = run_local(part_cfg, resume=True)
    assert resumed["loss"] == full["loss"]
    a = torch.load(tmp_path / "a" / "runs" / "tiny" / "checkpoints" / "step_00000006" / "rank0.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "runs" / "tiny" / "checkpoints" / "step_00000006" / "rank0.pt", weights_only=False)
    assert torch.equal(a["torch"], b["torch"])


def test_injected_nan_step_is_skipped_and_counted(tmp_path, doc_globs):
    result = run_local(tiny_cfg(tmp_path, doc_globs, "train.fault_inject_nan_steps=[2]"))
    assert result["bad_steps"] == 1
    assert torch.isfinite(torch.tensor(result["loss"]))


def test_consecutive_bad_steps_stop_the_run_naming_the_last_checkpoint(tmp_path, doc_globs):
    cfg = tiny_cfg(tmp_path, doc_globs, "train.fault_inject_nan_steps=[3, 4]", "train.max_bad_steps=2")
    with pytest.raises(TrainingStopped, match=r"last good checkpoint: .*step_00000003"):
        run_local(cfg)
    meta = json.loads((tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000003" / "meta.json").read_text())
    assert meta["step"] == 3


@pytest.mark.slow
def test_compare_baseline_trains_moe_and_dense_twin_on_the_same_data(tmp_path, doc_globs):
    from services.trainer.compare import compare_baseline, format_comparison

    table = compare_baseline(tiny_cfg(tmp_path, doc_globs, "train.steps=4", "train.eval_every=4"))
    assert table["moe"]["tokens"] == table["dense"]["tokens"]
    assert table["moe"]["total_params"] > table["dense"]["total_params"]
    assert abs(table["moe"]["active_params"] - table["dense"]["active_params"]) / table["moe"]["active_params"] < 0.02
    assert "eval/loss" in format_comparison(table)


@pytest.mark.parametrize("expert_path", ["loop", "fused", "fused-concurrent"])
def test_activation_checkpointing_gives_the_same_run(tmp_path, doc_globs, monkeypatch, expert_path):
    # Every routed-expert way is pinned in turn: which one the autotune picks depends on the machine.
    monkeypatch.setenv("MOELAB_EXPERT_PATH", expert_path)
    plain = run_local(tiny_cfg(tmp_path / "a", doc_globs, "train.steps=3", "train.eval_every=3"))
    ac = run_local(tiny_cfg(tmp_path / "b", doc_globs, "train.steps=3", "train.eval_every=3",
                            "train.activation_checkpointing=true"))
    assert ac["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert ac["eval/loss"] == pytest.approx(plain["eval/loss"], rel=1e-6)


@pytest.mark.slow
def test_compiled_blocks_train_to_the_same_loss(tmp_path, doc_globs):
    plain = run_local(tiny_cfg(tmp_path / "a", doc_globs, "train.steps=2", "train.eval_every=2"))
    compiled = run_local(tiny_cfg(tmp_path / "b", doc_globs, "train.steps=2", "train.eval_every=2",
                                  "train.compile=true"))
    assert compiled["loss"] == pytest.approx(plain["loss"], rel=1e-4)
