"""Parameter/FLOP accounting and the recipes' names: 7B2A, 16B4A, and dense twins that match."""

from __future__ import annotations

import pytest

from shared.config import load_config
from shared.model import MoETransformer, count_params, flops_per_token

PROXIES = {"proxy-7b2a": (7e9, 2e9), "proxy-16b4a": (16e9, 4e9)}


@pytest.mark.parametrize("name", sorted(PROXIES))
def test_proxy_total_and_active_params_within_5_percent_of_name(name):
    total, active = PROXIES[name]
    counts = count_params(load_config(f"configs/{name}.yaml").model)
    assert abs(counts.total / total - 1) < 0.05, f"{name}: {counts.total / 1e9:.2f}B total"
    assert abs(counts.active / active - 1) < 0.05, f"{name}: {counts.active / 1e9:.2f}B active"


@pytest.mark.parametrize("name", ["tiny", "proxy-7b2a", "proxy-16b4a"])
def test_dense_twin_active_params_within_2_percent(name):
    moe = count_params(load_config(f"configs/{name}.yaml").model)
    dense = count_params(load_config(f"configs/{name}-dense.yaml").model)
    assert dense.total == dense.active
    assert abs(dense.active / moe.active - 1) < 0.02, f"{name}: dense {dense.active} vs MoE active {moe.active}"


def test_counts_match_a_real_model_and_hand_count():
    cfg = load_config("configs/tiny.yaml").model
    counts = count_params(cfg)
    model = MoETransformer(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    D, E, F, K = cfg.d_model, cfg.moe.n_routed_experts, cfg.moe.expert_hidden, cfg.moe.top_k
    n_moe = cfg.n_layers - cfg.first_k_dense
    assert counts.total - counts.active == n_moe * (E - K) * 3 * D * F


def test_flops_per_token_is_6n_plus_attention():
    cfg = load_config("configs/tiny.yaml").model
    counts = count_params(cfg)
    f128, f256 = flops_per_token(cfg, 128, counts), flops_per_token(cfg, 256, counts)
    assert f256 - f128 == 12 * cfg.n_layers * cfg.n_heads * cfg.resolved_head_dim * 128
    assert f128 == 6 * counts.active_matmul + 12 * cfg.n_layers * cfg.n_heads * cfg.resolved_head_dim * 128
