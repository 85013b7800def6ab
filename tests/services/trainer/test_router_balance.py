"""A short small-batch run with the tiny recipe's balancing keeps every MoE layer near balance."""

from __future__ import annotations

import pytest

from services.trainer.launch import run_local
from services.trainer.loop import run_dir
from services.trainer.metrics import read_metrics
from tests.services.trainer.conftest import tiny_cfg

STEPS = 120


@pytest.mark.slow
def test_tiny_recipe_keeps_every_layer_balanced_after_warmup(tmp_path, doc_globs):
    # tiny.yaml's batch shape (16 micro-batches of one 128-token sequence) and its balance settings
    cfg = tiny_cfg(tmp_path, doc_globs, "train.micro_batch_size=1", "train.grad_accum=16", "train.seq_len=128",
                   "model.max_seq_len=128", f"train.steps={STEPS}", f"train.eval_every={STEPS}",
                   "train.checkpoint_every=1000", "optim.warmup_steps=16")
    assert cfg.model.moe.balance.bias_update_every == "micro_batch"
    result = run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    layers = sorted(k for k in series if k.startswith("router/maxvio/layer"))
    assert layers, "no per-layer MaxVio logged"
    for key in layers:
        late = [v for s, v in series[key].items() if s >= STEPS // 2]
        assert sum(late) / len(late) < 0.1, (key, sum(late) / len(late))
        assert max(late) < 1.0, (key, max(late))  # no expert above 2x its balanced share
    assert result["router_warnings"] == 0
