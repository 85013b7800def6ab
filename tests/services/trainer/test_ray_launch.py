"""The Ray Train path: 2 gloo workers (EP over both) train the tiny config through `run_ray`, and a
config written with relative paths (as `moelab train configs/tiny.yaml` is) trains under Ray."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from services.trainer.launch import run_ray
from tests.services.trainer.conftest import tiny_cfg


@pytest.mark.slow
@pytest.mark.parametrize("overlap", [False, True], ids=["ep2", "ep2-overlap"])
def test_ray_train_two_workers_with_expert_parallel(tmp_path, doc_globs, ray_local, overlap):
    cfg = tiny_cfg(tmp_path, doc_globs, "train.workers=2", "train.dp_size=2", "train.ep_size=2", "train.steps=4",
                   "train.eval_every=4", "train.checkpoint_every=4", "cluster.num_cpus=2",
                   f"train.ep_overlap={str(overlap).lower()}")
    result = run_ray(cfg)
    assert result["steps"] == 4
    assert math.isfinite(result["loss"]) and math.isfinite(result["eval/loss"])
    assert (tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000004" / "meta.json").is_file()


@pytest.mark.slow
def test_relative_paths_mean_the_launch_folder_inside_ray_workers(tmp_path, doc_globs, ray_local, monkeypatch):
    """Ray Train starts workers in a trial folder of its own; the data, shards and run folder named
    relative to where training was launched must still be found and written there."""
    train, held_out = (Path(g).parent for g in doc_globs)
    for name, src in (("train", train), ("eval", held_out)):
        shutil.copytree(src, tmp_path / "docs" / name)
    monkeypatch.chdir(tmp_path)
    cfg = tiny_cfg(Path("."), ("docs/train/*.parquet", "docs/eval/*.parquet"), "train.steps=2", "train.eval_every=2",
                   "train.checkpoint_every=2", "cluster.num_cpus=2")
    assert not Path(cfg.mixture.shard_dir).is_absolute()
    result = run_ray(cfg)
    assert result["steps"] == 2 and math.isfinite(result["eval/loss"])
    assert (tmp_path / "tokens" / "manifest.json").is_file()
    assert (tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000002" / "meta.json").is_file()
