"""MoETransformer: shapes, aux, determinism, overfitting a batch, routing options, bungee placement."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from shared.config import load_config
from shared.config.model import ModelConfig
from shared.model import MoETransformer, summarize


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from threads, and on a shared 2-core box threads only wait on each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny(**overrides) -> ModelConfig:
    return load_config("configs/tiny.yaml", [f"model.{k}={v}" for k, v in overrides.items()]).model


def _train(cfg: ModelConfig, steps: int, seed: int = 0, lr: float = 1e-2):
    torch.manual_seed(seed)
    model = MoETransformer(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (4, 33), generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        (loss + aux["aux_loss"]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.update_router_biases()
        losses.append(loss.item())
    return model, losses


def test_forward_shapes_and_router_stats_per_moe_layer():
    cfg = _tiny()
    model = MoETransformer(cfg)
    logits, aux = model(torch.randint(0, cfg.vocab_size, (2, 16)))
    assert logits.shape == (2, 16, cfg.vocab_size)
    assert sorted(aux["layers"]) == list(range(cfg.first_k_dense, cfg.n_layers))
    stats = aux["layers"][cfg.first_k_dense]
    assert int(stats["tokens_per_expert"].sum()) == 2 * 16 * cfg.moe.top_k
    assert aux["aux_loss"].requires_grad
    flat = summarize(aux)
    assert f"layer{cfg.first_k_dense}/max_vio" in flat and "aux_loss" in flat


@pytest.mark.parametrize("config", ["configs/tiny.yaml", "configs/tiny-dense.yaml"])
def test_tiny_model_overfits_a_small_batch(config):
    cfg = load_config(config).model
    _, losses = _train(cfg, steps=30, lr=3e-2)
    assert losses[-1] < 0.2 * losses[0], f"{config}: loss {losses[0]:.3f} -> {losses[-1]:.3f}"


@pytest.mark.parametrize("backend", ["auto", "fused"])
def test_two_runs_same_seed_are_bitwise_equal(backend):
    cfg = _tiny(**{"moe.dispatch_backend": backend})
    m1, l1 = _train(cfg, steps=3, seed=7)
    m2, l2 = _train(cfg, steps=3, seed=7)
    assert l1 == l2
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)


def test_bias_update_runs_in_training_and_is_in_state_dict():
    model, _ = _train(_tiny(), steps=2)
    biases = [v for k, v in model.state_dict().items() if k.endswith("expert_bias_E")]
    assert len(biases) == 3 and any(b.abs().sum() > 0 for b in biases)


@pytest.mark.parametrize(
    "overrides",
    [
        {"moe.score_func": "softmax", "moe.norm_topk_prob": "false"},
        {"moe.n_groups": 4, "moe.topk_groups": 2, "moe.route_scale": 2.5},
        {"moe.capacity_factor": 0.5},
        {"tie_embeddings": "true", "moe.bungee": "false", "moe.n_shared_experts": 0},
        {"moe.balance.switch_aux_alpha": 0.01, "moe.balance.z_loss_coef": 0.001},
    ],
    ids=["softmax", "group_limited", "capacity", "tied_nobungee_noshared", "switch_z"],
)
def test_routing_options_run_forward_and_backward(overrides):
    cfg = _tiny(**overrides)
    model = MoETransformer(cfg)
    logits, aux = model(torch.randint(0, cfg.vocab_size, (2, 16)))
    (logits.float().pow(2).mean() + aux["aux_loss"]).backward()
    stats = aux["layers"][cfg.first_k_dense]
    if cfg.moe.capacity_factor is not None:
        assert int(stats["dropped_tokens"]) > 0
    assert all(p.grad is not None for n, p in model.named_parameters() if "bungee" in n)


def test_group_limited_routing_uses_at_most_topk_groups():
    cfg = _tiny(**{"moe.n_groups": 4, "moe.topk_groups": 1})
    router = MoETransformer(cfg).moe_layers()[0].router
    idx = router(torch.randn(50, cfg.d_model)).idx_TK
    groups = idx // (cfg.moe.n_routed_experts // 4)
    assert (groups == groups[:, :1]).all()


def test_expert_weights_are_3d_and_named_with_shapes():
    cfg = _tiny()
    experts = MoETransformer(cfg).moe_layers()[0].experts
    E, F_, D = cfg.moe.n_routed_experts, cfg.moe.expert_hidden, cfg.d_model
    assert experts.w1_EFD.shape == (E, F_, D) and experts.w3_EFD.shape == (E, F_, D)
    assert experts.w2_EDF.shape == (E, D, F_)


def test_bungee_placement_scales_the_moe_input_or_its_output():
    """input: the experts see b·x; output: y = b·(shared + routed) (doubling b doubles the layer's
    output). Under neither does b move the routing: a bungee trained towards zero must not take
    the router's input with it (every token would get the same scores)."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 64)
    outs = {}
    for placement in ("input", "output"):
        cfg = _tiny(**{"moe.bungee.placement": placement, "moe.bungee.init": 1.0})
        layer = MoETransformer(cfg).moe_layers()[0]
        y1, s1 = layer(x)
        with torch.no_grad():
            layer.bungee.fill_(2.0)
        y2, s2 = layer(x)
        outs[placement] = (y1, y2, s1["tokens_per_expert"], s2["tokens_per_expert"])
    y1, y2, load1, load2 = outs["output"]
    torch.testing.assert_close(y2, 2 * y1)
    assert torch.equal(load1, load2)
    y1, y2, load1, load2 = outs["input"]
    assert not torch.allclose(y2, 2 * y1)
    assert torch.equal(load1, load2)
    cfg = _tiny(**{"moe.bungee.placement": "input"})
    layer = MoETransformer(cfg).moe_layers()[0]
    with torch.no_grad():
        layer.bungee.fill_(0.0)
    _, stats = layer(x)
    assert stats["router_entropy"] < math.log(cfg.moe.n_routed_experts) - 1e-3  # scores still vary by token
    assert _tiny(**{"moe.bungee": "false"}).moe.bungee.enabled is False
