"""A run name holds one run: reusing it needs --resume or --new, and a resume that changes the run's
schedule needs --allow-config-change, which is recorded."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from services.trainer.run_claim import CHANGES_FILE, RunClaimError, claim_run, run_folder
from shared.config import load_config, save_resolved

runner = CliRunner()


def _cfg(tmp_path, *overrides):
    return load_config(None, [f"train.out_dir={tmp_path}/runs", "tracker.mode=disabled", "train.steps=6", *overrides])


def _hold(cfg):
    folder = run_folder(cfg)
    save_resolved(cfg, folder)
    (folder / "checkpoints" / "step_00000003").mkdir(parents=True)
    return folder


def test_a_fresh_name_is_free_and_a_used_one_is_refused_without_resume_or_new(tmp_path):
    cfg = _cfg(tmp_path)
    assert claim_run(cfg) is cfg
    folder = _hold(cfg)
    with pytest.raises(RunClaimError, match="--resume .* --new"):
        claim_run(cfg)
    assert claim_run(cfg, resume=True) is cfg
    second = claim_run(cfg, new=True)
    assert run_folder(second) == folder.with_name(folder.name + "-2")
    _hold(second)
    assert run_folder(claim_run(cfg, new=True)) == folder.with_name(folder.name + "-3")
    with pytest.raises(RunClaimError, match="choose one"):
        claim_run(cfg, resume=True, new=True)


def test_a_resume_that_changes_the_schedule_is_refused_or_recorded(tmp_path):
    folder = _hold(_cfg(tmp_path))
    longer = _cfg(tmp_path, "train.steps=12")
    with pytest.raises(RunClaimError, match=r"train.steps: 6 -> 12"):
        claim_run(longer, resume=True)
    assert not (folder / CHANGES_FILE).exists()
    claim_run(longer, resume=True, allow_config_change=True)
    entry = json.loads((folder / CHANGES_FILE).read_text())
    assert entry["changes"] == {"train.steps": {"saved": 6, "new": 12}} and entry["resumed_at_step"] == 3
    # where the work runs is not the run's shape
    claim_run(_cfg(tmp_path, "train.checkpoint_every=2", "train.device=cpu"), resume=True)


def test_the_train_command_refuses_a_used_run_name(tmp_path):
    cfg = _cfg(tmp_path)
    _hold(cfg)
    args = ["train", "--no-ray", f"train.out_dir={tmp_path}/runs", "tracker.mode=disabled", "train.steps=6"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("{}\n")
    res = runner.invoke(app, [args[0], str(recipe), *args[1:]])
    assert res.exit_code == 2 and "already holds a run" in res.output
    res = runner.invoke(app, [args[0], str(recipe), *args[1:-1], "train.steps=9", "--resume"])
    assert res.exit_code == 2 and "--allow-config-change" in res.output


def test_compare_baseline_has_its_own_run_names(tmp_path):
    cfg = _cfg(tmp_path)
    _hold(cfg)  # a `moelab train` run under the plain name does not block the comparison ...
    compare = cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_name": f"{cfg.name}-compare"})})
    _hold(compare)  # ... but an earlier comparison does, unless --new
    recipe = tmp_path / "r.yaml"
    recipe.write_text("{}\n")
    res = runner.invoke(app, ["compare-baseline", str(recipe), f"train.out_dir={tmp_path}/runs", "tracker.mode=disabled",
                              "train.steps=6"])
    assert res.exit_code == 2 and f"{cfg.name}-compare" in res.output and "already holds a run" in res.output
