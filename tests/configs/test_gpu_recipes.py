"""The GPU recipes are recipes: they validate, train what they say (bf16 autocast, seq 4096, Muon +
AdamW, GPUs) and their plan fits the card each one names."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from moelab.cli import app
from shared.config import load_config
from shared.plan.memory import plan_memory

RECIPES = [  # (recipe, GPUs, GB per GPU of its target card)
    ("configs/proxy-7b2a.yaml", 1, 141),
    ("configs/proxy-7b2a-dense.yaml", 1, 141),
    ("configs/proxy-16b4a.yaml", 8, 80),
    ("configs/proxy-16b4a-dense.yaml", 8, 80),
    ("configs/cluster-16b4a.yaml", 8, 80),
]


@pytest.mark.parametrize("recipe,gpus,gib", RECIPES)
def test_config_check_passes_and_the_plan_fits_the_target_card(recipe, gpus, gib):
    res = CliRunner().invoke(app, ["config", "check", recipe])
    assert res.exit_code == 0, res.output
    plan = plan_memory(load_config(recipe), gpus, gib)
    assert plan.fits, plan.to_json()
    assert plan.total < 0.95 * gib * 2**30  # some headroom beyond the plan's own reserve


@pytest.mark.parametrize("recipe,gpus,gib", RECIPES)
def test_gpu_recipes_train_on_gpus_in_bf16_at_seq_4096_with_muon(recipe, gpus, gib):
    cfg = load_config(recipe)
    t = cfg.train
    assert (t.device, t.dtype, t.seq_len, t.workers) == ("cuda", "bfloat16", 4096, gpus)
    assert cfg.optim.name == "muon_adamw" and cfg.model.max_seq_len >= t.seq_len
    assert cfg.model.moe.precision.master_weights == "fp32"
    if cfg.model.ffn == "moe" and gpus > 1:
        assert t.ep_size == gpus  # experts spread over the node
