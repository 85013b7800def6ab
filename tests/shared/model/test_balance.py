"""Aux-loss-free balancing and router statistics."""

from __future__ import annotations

import math

import torch

from shared.config.model import MoEConfig
from shared.model.moe import MoELayer
from shared.model.stats import max_violation


def _skewed_layer(rate: float) -> MoELayer:
    cfg = MoEConfig(
        n_routed_experts=8, n_shared_experts=0, expert_hidden=8, top_k=2, bungee=False,
        balance={"bias_update_rate": rate, "seq_aux_alpha": 0.0},
    )
    layer = MoELayer(16, cfg)
    with torch.no_grad():  # a router that prefers low-numbered experts strongly
        layer.router.weight_ED.copy_(torch.randn(8, 16, generator=torch.Generator().manual_seed(0)) * 0.1)
        layer.router.weight_ED[:, 0] += torch.linspace(2.0, -2.0, 8)
    return layer


def _batch(seed: int) -> torch.Tensor:
    x = torch.randn(4, 64, 16, generator=torch.Generator().manual_seed(seed))
    x[..., 0] = 1.0 + 0.3 * x[..., 0]  # the feature the skew reads
    return x


def test_bias_update_drives_maxvio_below_0_2():
    layer = _skewed_layer(rate=1e-2)
    _, stats = layer.eval()(_batch(999))
    assert float(stats["max_vio"]) > 1.0, "the synthetic router must start badly skewed"
    layer.train()
    reached = None
    for step in range(300):
        with torch.no_grad():
            _, stats = layer(_batch(step))
        assert float(stats["aux_loss"]) == 0.0  # seq-aux off: only the bias balances
        layer.update_bias()
        with torch.no_grad():
            _, held_out = layer.eval()(_batch(999))
        layer.train()
        if float(held_out["max_vio"]) < 0.2:
            reached = step
            break
    assert reached is not None, f"MaxVio still {float(held_out['max_vio']):.3f} after 300 bias updates"
    assert float(layer.router.expert_bias_E.max()) > 0 > float(layer.router.expert_bias_E.min())


def test_bias_update_moves_by_gamma_sign_and_resets_loads():
    layer = _skewed_layer(rate=1e-3)
    layer.load_accum_E.copy_(torch.tensor([10.0, 0, 2, 2, 2, 2, 2, 4]))  # mean 3
    layer.update_bias()
    expected = 1e-3 * torch.tensor([-1.0, 1, 1, 1, 1, 1, 1, -1])
    torch.testing.assert_close(layer.router.expert_bias_E, expected)
    assert layer.load_accum_E.sum() == 0


def test_bias_is_a_checkpointed_buffer_without_grad():
    layer = _skewed_layer(rate=1e-3)
    assert "router.expert_bias_E" in layer.state_dict()
    assert "load_accum_E" not in layer.state_dict()
    assert all("bias" not in n for n, _ in layer.named_parameters())


def test_router_stats_match_hand_computed_example():
    # 4 tokens, 4 experts, top-1, softmax over logits [a, 0, 0, 0] chosen so every token picks expert 0
    # except token 3 which picks expert 2.
    cfg = MoEConfig(n_routed_experts=4, n_shared_experts=0, expert_hidden=4, top_k=1, score_func="softmax",
                    bungee=False, balance={"seq_aux_alpha": 0.5, "switch_aux_alpha": 0.0, "z_loss_coef": 0.0})
    layer = MoELayer(4, cfg).eval()
    with torch.no_grad():
        layer.router.weight_ED.copy_(torch.eye(4))
        layer.router.expert_bias_E.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    ln3 = math.log(3.0)
    x = torch.tensor([[[ln3, 0, 0, 0], [ln3, 0, 0, 0], [ln3, 0, 0, 0], [0, 0, ln3, 0]]])
    _, s = layer(x)
    assert s["tokens_per_expert"].tolist() == [3, 0, 1, 0]
    # loads [3,0,1,0], mean 1: MaxVio = (3 - 1) / 1 = 2
    assert float(s["max_vio"]) == 2.0
    assert int(s["dead_experts"]) == 2
    # each token's softmax is [3,1,1,1]/6 (permuted): entropy = -(0.5 ln 0.5 + 3·(1/6) ln(1/6))
    h = -(0.5 * math.log(0.5) + 3 * (1 / 6) * math.log(1 / 6))
    assert abs(float(s["router_entropy"]) - h) < 1e-6
    assert abs(float(s["bias_min"]) + 0.2) < 1e-7 and abs(float(s["bias_max"]) - 0.3) < 1e-7
    assert abs(float(s["bias_mean"]) - 0.05) < 1e-7
    # seq aux (one sequence): f = E/(K·T)·counts = [3,0,1,0]; P = mean over tokens of the scores
    P = torch.tensor([[0.5, 1 / 6, 1 / 6, 1 / 6]] * 3 + [[1 / 6, 1 / 6, 0.5, 1 / 6]]).mean(0)
    f = torch.tensor([3.0, 0, 1, 0])
    assert abs(float(s["seq_aux_loss"]) - float((f * P).sum())) < 1e-6
    assert abs(float(s["switch_aux_loss"]) - float(4 * (f / 4 * P).sum())) < 1e-6
    # z-loss: logsumexp([ln3,0,0,0]) = ln 6 for every token
    assert abs(float(s["z_loss"]) - math.log(6.0) ** 2) < 1e-5
    assert abs(s["aux_loss"].detach().item() - 0.5 * float((f * P).sum())) < 1e-6


def test_max_violation_is_zero_when_balanced():
    assert float(max_violation(torch.tensor([5, 5, 5, 5]))) == 0.0


def test_bias_stays_fp32_when_the_layer_is_cast_to_bf16():
    layer = _skewed_layer(rate=1e-3).to(torch.bfloat16)
    assert layer.router.expert_bias_E.dtype == torch.float32
    y, _ = layer(_batch(0).to(torch.bfloat16))
    assert y.dtype == torch.bfloat16


def _layer_with(eval_bias: str, horizon: int = 1024) -> MoELayer:
    cfg = MoEConfig(n_routed_experts=8, n_shared_experts=0, expert_hidden=8, top_k=2, bungee=False,
                    balance={"bias_update_rate": 1e-2, "bias_update_rule": "error", "seq_aux_alpha": 0.0,
                             "eval_bias": eval_bias, "bias_average_tokens": horizon})
    return MoELayer(16, cfg)


def test_bias_average_weighs_each_update_by_the_tokens_behind_it():
    layer = _layer_with("average", horizon=1024)
    layer.load_accum_E.copy_(torch.tensor([4.0, 0, 2, 2, 2, 2, 2, 2]) * 16)  # 256 assignments = 128 tokens, top-2
    layer.update_bias()
    b1 = layer.router.expert_bias_E.clone()
    w1 = 1 - math.exp(-128 / 1024)
    torch.testing.assert_close(layer.router.expert_bias_avg_E, w1 * b1)
    layer.load_accum_E.copy_(torch.tensor([4.0, 2, 2, 2, 2, 2, 1, 1]) * 128)  # 2,048 assignments = 1,024 tokens
    layer.update_bias()
    w2 = 1 - math.exp(-1024 / 1024)
    torch.testing.assert_close(layer.router.expert_bias_avg_E, (1 - w2) * w1 * b1 + w2 * layer.router.expert_bias_E)


def test_the_average_spans_the_same_tokens_whatever_the_update_cadence():
    """16 updates of 128 tokens fold a constant bias in as far as one update of 2,048 tokens."""
    per_micro_batch, per_step = _layer_with("average"), _layer_with("average")
    for layer in (per_micro_batch, per_step):
        layer.router.expert_bias_E.fill_(1.0)
        layer.cfg = layer.router.cfg = layer.cfg.model_copy(
            update={"balance": layer.cfg.balance.model_copy(update={"bias_update_rate": 0.0})})
    for _ in range(16):
        per_micro_batch.load_accum_E.fill_(32.0)  # 256 assignments, 128 tokens
        per_micro_batch.update_bias()
    per_step.load_accum_E.fill_(512.0)  # 4,096 assignments, 2,048 tokens
    per_step.update_bias()
    torch.testing.assert_close(per_micro_batch.router.expert_bias_avg_E, per_step.router.expert_bias_avg_E)
    torch.testing.assert_close(per_step.router.expert_bias_avg_E, torch.full((8,), 1 - math.exp(-2048 / 1024)))


def _routes(layer: MoELayer, x: torch.Tensor) -> list[int]:
    with torch.no_grad():
        _, stats = layer(x)
    return stats["tokens_per_expert"].tolist()


def test_eval_mode_routes_with_the_average_and_training_with_the_live_bias():
    x = _batch(3)
    for eval_bias in ("average", "live"):
        layer = _layer_with(eval_bias)
        with torch.no_grad():
            layer.router.expert_bias_E.copy_(torch.tensor([5.0, 5.0, 0, 0, 0, 0, 0, 0]))  # live: experts 0 and 1 only
            layer.router.expert_bias_avg_E.zero_()  # average: the router's own preference
        live_loads = _routes(layer.train(), x)
        assert live_loads[0] == live_loads[1] == x.shape[0] * x.shape[1]
        eval_loads = _routes(layer.eval(), x)
        assert (eval_loads == live_loads) == (eval_bias == "live")
        layer.load_accum_E.zero_()


def test_a_state_dict_without_the_average_loads_with_the_average_set_to_the_bias():
    old = _layer_with("average").state_dict()
    old["router.expert_bias_E"] = torch.linspace(-1, 1, 8)
    del old["router.expert_bias_avg_E"]
    layer = _layer_with("average")
    layer.load_state_dict(old)
    torch.testing.assert_close(layer.router.expert_bias_avg_E, torch.linspace(-1, 1, 8))
    assert layer.router.expert_bias_avg_E.data_ptr() != layer.router.expert_bias_E.data_ptr()
