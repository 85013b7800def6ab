"""The registry and the config agree, and the builder follows the per-layer pattern."""

from __future__ import annotations

import pytest
import torch

from shared.config.attention import ATTENTION_KINDS
from shared.config.model import ModelConfig
from shared.model.attention import ATTENTION_REGISTRY, build_attention


def test_config_attention_kinds_equal_the_registry():
    assert set(ATTENTION_KINDS) == set(ATTENTION_REGISTRY)


def test_pattern_repeats_over_depth():
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=8)
    cfg.attention.pattern = ["kda", "kda", "kda", "mla"]
    kinds = [type(build_attention(cfg, i)) for i in range(8)]
    assert kinds[:4] == kinds[4:]
    assert kinds[0] is ATTENTION_REGISTRY["kda"] and kinds[3] is ATTENTION_REGISTRY["mla"]


def test_unknown_kind_is_rejected_by_config_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed"):
        ModelConfig(attention={"pattern": ["gqa", "flash"]})


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_every_kind_maps_BTD_to_BTD_and_backpropagates(kind):
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, max_seq_len=64)
    cfg.attention.pattern = [kind]
    m = build_attention(cfg, 0)
    x = torch.randn(2, 33, 32, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_swa_with_a_global_layer_every_fourth():
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=8)
    cfg.attention.pattern = ["swa", "swa", "swa", "gqa"]
    names = [type(build_attention(cfg, i)).__name__ for i in range(8)]
    assert names == ["SlidingWindowAttention"] * 3 + ["GroupedQueryAttention"] + ["SlidingWindowAttention"] * 3 + [
        "GroupedQueryAttention"
    ]
