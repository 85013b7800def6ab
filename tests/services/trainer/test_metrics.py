"""MFU counts training FLOPs once, and the local metrics file keeps every logged point."""

from __future__ import annotations

import pytest

from services.trainer.metrics import MetricsFile, mfu, read_metrics
from shared.config import load_config
from shared.model import flops_per_token


def test_mfu_matches_a_hand_count_of_a_small_config():
    """2 MoE layers (GQA: 2 heads, 1 KV head, head width 16; 4 experts of width 16, top-2, 1 shared),
    d=32, vocab 128, sequence 64. Active matmul weights per token, by hand:
    attention 32·32 + 2·(32·16) + 32·32 = 3,072; router 4·32 = 128; two routed experts and the
    shared one 3·(3·16·32) = 4,608; per layer 7,808; ×2 layers + head 128·32 = 19,712.
    Training FLOPs = 6·19,712 + 12·L·H·d_head·T = 118,272 + 12·2·2·16·64 = 167,424 per token."""
    cfg = load_config(None, ["model.vocab_size=128", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
                             "model.n_kv_heads=1", "model.first_k_dense=0", "model.moe.n_routed_experts=4",
                             "model.moe.top_k=2", "model.moe.n_shared_experts=1", "model.moe.expert_hidden=16"]).model
    assert flops_per_token(cfg, 64) == 167_424
    assert mfu(1_000.0, 167_424, 1e9) == pytest.approx(0.167424)
    assert mfu(1_000.0, 167_424, None) is None


def test_metrics_file_keeps_the_last_value_per_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    first = MetricsFile(path)
    first.write(0, {"loss": 2.0})
    first.write(1, {"loss": float("nan"), "lr": 0.1})
    first.close()
    resumed = MetricsFile(path)  # a resumed run appends and overwrites step 1
    resumed.write(1, {"loss": 1.5})
    resumed.close()
    series = read_metrics(path)
    assert series["loss"] == {0: 2.0, 1: 1.5} and series["lr"] == {1: 0.1}
    assert MetricsFile(tmp_path / "off.jsonl", enabled=False).path.exists() is False
