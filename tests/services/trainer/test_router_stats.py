"""Router statistics come from the global batch: every micro-batch of every rank, so 2 processes
report what 1 process reports on the same global batch (MaxVio, dead experts, entropy, loads,
MaxVio_global at eval) — not rank 0's last micro-batch."""

from __future__ import annotations

import pytest
import torch

from services.trainer.launch import run_local, spawn_local
from services.trainer.loop import run_dir
from services.trainer.metrics import read_metrics
from services.trainer.router_stats import RouterTally
from tests.services.trainer.conftest import tiny_cfg


def _layers(load):
    """One MoE layer (index 1) whose forward routed `load` tokens to each expert."""
    return {1: {"tokens_per_expert": torch.tensor(load, dtype=torch.float32), "router_entropy": torch.tensor(1.0),
                "bias_max": torch.tensor(0.0), "bias_min": torch.tensor(0.0)}}


def test_tally_sums_micro_batches_before_maxvio():
    """Two micro-batches skewed in opposite directions are balanced together: MaxVio 0, not 1."""
    tally = RouterTally()
    tally.add(_layers([4, 0]))
    tally.add(_layers([0, 4]))
    stats = tally.layer_stats()[1]
    assert stats["maxvio"] == 0.0 and stats["dead"] == 0 and stats["tokens_per_expert"] == [4.0, 4.0]


@pytest.mark.slow
def test_two_process_router_statistics_equal_one_process(tmp_path, doc_globs):
    common = ("train.steps=4", "train.grad_accum=2", "train.eval_every=2", "train.eval_batches=2",
              "model.moe.balance.bias_update_rate=0.01")
    one = tiny_cfg(tmp_path, doc_globs, "train.run_name=one", "train.micro_batch_size=4", *common)
    two = tiny_cfg(tmp_path, doc_globs, "train.run_name=two", "train.micro_batch_size=2", "train.workers=2",
                   "train.dp_size=2", "train.ep_size=2", *common)
    run_local(one)
    spawn_local(two)
    a, b = read_metrics(run_dir(one) / "metrics.jsonl"), read_metrics(run_dir(two) / "metrics.jsonl")
    keys = [k for k in a if k.startswith(("router/", "eval/maxvio_global"))]
    assert "router/maxvio" in keys and "eval/maxvio_global" in keys and "router/dead_experts" in keys
    assert a["router/maxvio"][0] == b["router/maxvio"][0]  # same parameters, same tokens, same loads
    for key in keys:
        for step, want in a[key].items():
            assert b[key][step] == pytest.approx(want, rel=1e-4, abs=1e-6), (key, step)


def test_uniform_routing_floor_falls_with_the_tokens_and_is_zero_when_every_expert_is_chosen():
    from services.trainer.router_stats import uniform_routing_maxvio

    assert uniform_routing_maxvio(100, experts=2, top_k=2) == 0.0  # each token takes both experts
    floors = [uniform_routing_maxvio(t, experts=8, top_k=2) for t in (512, 2048, 8192)]
    assert 0.08 < floors[0] < 0.17  # binomial spread of 1,024 assignments over 8 experts, max of 8
    assert floors[0] > floors[1] > floors[2] > 0
    assert abs(floors[0] / floors[2] - 4.0) < 1.0  # the spread falls as 1/sqrt(tokens)


def test_step_maxvio_is_logged_beside_its_chance_level():
    from services.trainer.router_stats import router_metrics, uniform_routing_maxvio

    stats = {1: {"maxvio": 0.05, "entropy": 1.0, "dead": 0, "tokens_per_expert": [512.0] * 8}}
    metrics = router_metrics(stats, {}, top_k=2)
    assert metrics["router/maxvio_chance"] == uniform_routing_maxvio(2048, 8, 2)
    assert 0.04 < metrics["router/maxvio_chance"] < 0.08  # 2,048 tokens, top-2 of 8: ~0.059
    assert "router/maxvio_chance" not in router_metrics(stats, {})
