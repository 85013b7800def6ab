"""The Ray Train path: 2 gloo workers (EP over both) train the tiny config through `run_ray`."""

from __future__ import annotations

import math

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
