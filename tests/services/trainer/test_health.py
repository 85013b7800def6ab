"""Router-health warnings fire on collapse, stay quiet on a healthy router, and fire once per episode."""

from __future__ import annotations

import math

from services.trainer.health import RouterHealthMonitor
from shared.config.train import RouterHealthConfig

E = 8


def _healthy(step):
    counts = [100 + (step + e) % 5 for e in range(E)]
    return {"maxvio": 0.05, "entropy": 0.95 * math.log(E), "tokens_per_expert": counts}


def _collapsed():
    return {"maxvio": E - 1.0, "entropy": 0.01, "tokens_per_expert": [800] + [0] * (E - 1)}


def test_healthy_router_never_warns():
    mon = RouterHealthMonitor(RouterHealthConfig(window=5, dead_window=10), E)
    for step in range(200):
        assert mon.observe(step, {1: _healthy(step), 2: _healthy(step)}) == []


def test_collapsed_router_warns_within_the_window_and_only_once():
    mon = RouterHealthMonitor(RouterHealthConfig(window=5, dead_window=10), E)
    fired = []
    for step in range(30):
        fired += mon.observe(step, {1: _collapsed()})
    kinds = {w.kind: w.step for w in fired}
    assert kinds == {"maxvio": 4, "entropy_collapse": 4, "dead_experts": 9}
    assert len(fired) == 3
    assert "experts [1, 2, 3, 4, 5, 6, 7]" in next(w.message for w in fired if w.kind == "dead_experts")


def test_warning_rearms_after_recovery():
    mon = RouterHealthMonitor(RouterHealthConfig(window=3, dead_window=100), E)
    fired = []
    for step in range(10):
        fired += mon.observe(step, {0: _collapsed()})
    for step in range(10, 20):
        fired += mon.observe(step, {0: _healthy(step)})
    for step in range(20, 30):
        fired += mon.observe(step, {0: _collapsed()})
    assert [w.step for w in fired if w.kind == "maxvio"] == [2, 22]


def test_a_single_spike_does_not_warn():
    mon = RouterHealthMonitor(RouterHealthConfig(window=5), E)
    for step in range(50):
        stats = _collapsed() if step % 5 == 0 else _healthy(step)
        stats = {**stats, "tokens_per_expert": _healthy(step)["tokens_per_expert"]}
        assert mon.observe(step, {0: stats}) == []


def _run_router(collapsed: bool, steps: int = 30) -> list:
    import torch

    from shared.config import load_config
    from shared.model import MoETransformer

    rate = 0.0 if collapsed else 1e-3
    cfg = load_config(None, ["model.vocab_size=256", "model.n_layers=2", "model.first_k_dense=1",
                             f"model.moe.balance.bias_update_rate={rate}"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    if collapsed:  # a biased init: two experts win every selection and the bias never corrects it
        with torch.no_grad():
            model.moe_layers()[0].router.expert_bias_E[:2] = 10.0
    mon = RouterHealthMonitor(RouterHealthConfig(window=5, dead_window=10), cfg.model.moe.n_routed_experts)
    fired = []
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        with torch.no_grad():
            _, aux = model(torch.randint(0, 256, (4, 64), generator=g))
        stats = {i: {"maxvio": float(s["max_vio"]), "entropy": float(s["router_entropy"]),
                     "tokens_per_expert": s["tokens_per_expert"].tolist()} for i, s in aux["layers"].items()}
        fired += mon.observe(step, stats)
        model.update_router_biases()
    return fired


def test_warning_fires_on_a_collapsed_model_router_and_not_on_a_healthy_one():
    collapsed = _run_router(collapsed=True)
    assert {w.kind for w in collapsed} >= {"maxvio", "dead_experts"}
    assert _run_router(collapsed=False) == []
