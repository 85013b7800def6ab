"""The activation count equals what autograd really saves, op by op, for small configs."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.model import MoETransformer
from shared.plan.activations import F32, activation_plan, block_bytes, head_bytes
from tests.shared.plan.saved import saved_bytes

SMALL = ["model.d_model=64", "model.n_heads=4", "model.n_kv_heads=2", "model.moe.n_routed_experts=8",
         "model.moe.expert_hidden=32", "model.moe.top_k=2", "model.moe.n_shared_experts=1", "model.n_layers=3",
         "model.vocab_size=512", "model.first_k_dense=1", "model.moe.dispatch_backend=grouped_mm"]
B, T = 2, 24


def _measure(overrides, autocast, checkpoint=False):
    cfg = load_config("configs/tiny.yaml", [*SMALL, *overrides])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    if checkpoint:
        from services.trainer.parallel import apply_block_options

        model = apply_block_options(model, cfg.train.model_copy(update={"activation_checkpointing": True}))
    tokens = torch.randint(0, cfg.model.vocab_size, (B, T + 1), generator=torch.Generator().manual_seed(1))
    return cfg, saved_bytes(model, tokens, autocast)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("overrides", [[], ["model.moe.top_k=4", "model.moe.n_shared_experts=2"],
                                       ["model.ffn=dense"], ["model.n_kv_heads=4", "model.moe.expert_hidden=48"]],
                         ids=["moe", "moe-top4", "dense", "mha"])
def test_each_block_part_saves_what_the_plan_counts(overrides, autocast):
    cfg, got = _measure(overrides, autocast)
    a = 2 if autocast else F32
    for i in range(cfg.model.n_layers):
        want = block_bytes(cfg.model, i, a, autocast)
        parts = {"attn_norm": want.norms / 2, "attn": want.attention, "ffn_norm": want.norms / 2, "ffn": want.ffn}
        for part, expected in parts.items():
            measured = got[f"layers.{i}.{part}"] / (B * T)
            assert measured == pytest.approx(expected, rel=0.03), (i, part, measured, expected)
    saved_head, _ = head_bytes(cfg.model, a)
    measured_head = (got["norm"] + got["head"]) / (B * T)
    assert measured_head == pytest.approx(saved_head, rel=0.03)


def test_mla_is_estimated_within_fifteen_percent():
    cfg, got = _measure(["model.attention.pattern=[mla]"], autocast=True)
    measured = got["layers.1.attn"] / (B * T)
    assert measured == pytest.approx(block_bytes(cfg.model, 1, 2, True).attention, rel=0.15)


def test_activation_checkpointing_keeps_only_each_blocks_fp32_input():
    cfg, got = _measure([], autocast=False, checkpoint=True)
    blocks = sum(v for k, v in got.items() if k.startswith("layers."))
    assert blocks == 0  # the checkpointed blocks keep nothing of their own...
    # ...only their inputs, saved by the checkpoint itself outside the blocks' forwards
    saved_head, _ = head_bytes(cfg.model, F32)
    inputs = got["head"] + got["norm"] - saved_head * B * T
    assert inputs == pytest.approx(cfg.model.n_layers * cfg.model.d_model * F32 * B * T, rel=0.05)
    plan = activation_plan(cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "activation_checkpointing": True, "micro_batch_size": B, "seq_len": T})}))
    assert plan.blocks == cfg.model.n_layers * cfg.model.d_model * F32 * B * T
