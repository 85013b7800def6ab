"""The training-time balance arms: bias steps from loads summed over a token window, and a router-LR
cooldown. The window must step exactly as one big batch would and survive a resume; the cooldown
must be the router's step at LR × factor, falling to no router change at the last step."""

from __future__ import annotations

import json

import pytest
import torch

from services.trainer.bias_window import BiasUpdates
from services.trainer.launch import run_local
from services.trainer.loop import run_dir
from services.trainer.metrics import read_metrics
from services.trainer.router_cooldown import RouterCooldown, cooldown_factor
from shared.checkpoint import load_trained_model
from shared.config import load_config
from shared.model import MoETransformer
from shared.model.balance import bias_update_
from shared.optim import build_optimizer
from tests.services.trainer.conftest import ROOT, tiny_cfg

B = "model.moe.balance"


def _model(*overrides: str) -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(load_config(ROOT / "configs" / "tiny.yaml", list(overrides)).model)


def _put_loads(model, loads):
    for layer, load in zip(model.moe_layers(), loads, strict=True):
        layer.load_accum_E.copy_(torch.tensor(load, dtype=torch.float32))


def test_window_steps_once_from_the_summed_loads_of_the_window():
    model = _model()
    updates = BiasUpdates(model, window_tokens=300)
    n_layers = len(model.moe_layers())
    first, second = [[20.0, 0, 2, 2, 2, 2, 2, 2]] * n_layers, [[0.0, 30, 2, 2, 2, 2, 2, 10]] * n_layers
    _put_loads(model, first)
    assert not updates(128)  # 128 < 300 tokens: the bias waits
    assert all(float(layer.router.expert_bias_E.abs().sum()) == 0 for layer in model.moe_layers())
    assert all(float(layer.load_accum_E.sum()) == 0 for layer in model.moe_layers())  # taken into the window
    saved = json.loads(json.dumps(updates.state_dict()))  # what a checkpoint's meta holds
    _put_loads(model, second)
    resumed = BiasUpdates(_model(), window_tokens=300)
    resumed.load_state_dict(saved)
    _put_loads(resumed.model, second)
    assert not updates(128) and not resumed(128)  # 256 tokens
    _put_loads(model, first)
    _put_loads(resumed.model, first)
    assert updates(128) and resumed(128)  # 384 ≥ 300: one step from the sum of the three
    expected = torch.zeros(8)
    bias_update_(expected, torch.tensor(first[0]) * 2 + torch.tensor(second[0]), 0.03, "error")
    for a, b in zip(model.moe_layers(), resumed.model.moe_layers(), strict=True):
        torch.testing.assert_close(a.router.expert_bias_E, expected)
        assert torch.equal(a.router.expert_bias_E, b.router.expert_bias_E)
        assert torch.equal(a.router.expert_bias_avg_E, b.router.expert_bias_avg_E)
    assert updates.tokens == 0 and all(float(s.sum()) == 0 for s in updates.loads)


def test_no_window_moves_the_bias_at_every_update_and_saves_nothing():
    model = _model()
    updates = BiasUpdates(model, window_tokens=0)
    _put_loads(model, [[20.0, 0, 2, 2, 2, 2, 2, 2]] * len(model.moe_layers()))
    assert updates(128)
    assert float(model.moe_layers()[0].router.expert_bias_E[0]) < 0 and updates.state_dict() == {}
    with pytest.raises(ValueError, match="MoE layers"):
        BiasUpdates(model, 1000).load_state_dict({"tokens": 5, "loads": [[0.0] * 8]})


def test_cooldown_factor_falls_linearly_to_zero_over_the_last_steps():
    assert [cooldown_factor(s, 10, 0.2) for s in range(10)] == [1.0] * 8 + [0.5, 0.0]
    assert [cooldown_factor(s, 10, 0.0) for s in range(10)] == [1.0] * 10
    assert cooldown_factor(149, 200, 0.15) == 1.0 and cooldown_factor(170, 200, 0.15) == pytest.approx(29 / 30)


def test_cooldown_step_is_the_router_step_at_the_scaled_lr():
    """A step scaled by the cooldown equals the step the optimizer takes with the router's LR × factor
    (the same step index, so the same schedule); no other parameter is touched."""
    steps, fraction = 10, 0.3  # 3 cooling steps: factors 2/3, 1/3, 0
    x = torch.randint(0, 4096, (2, 32))

    def one_step(step: int, router_scale: float, cooled: bool):
        model = _model()
        cfg = load_config(ROOT / "configs" / "tiny.yaml").optim
        cfg = cfg.model_copy(update={"lr_scales": {"router": 0.1 * router_scale}, "warmup_steps": 0})
        opt = build_optimizer(model, cfg, steps)
        opt.step_count = step
        _, aux = model(x, x)
        (aux["lm_loss"] + aux["aux_loss"]).backward()
        cool = RouterCooldown(model, fraction, steps)
        before = cool.before_step(step) if cooled else None
        opt.step()
        cool.after_step(step, before)
        return dict(model.named_parameters())

    for step in (7, 8, 9):
        f = cooldown_factor(step, steps, fraction)
        assert f < 1
        cooled, scaled = one_step(step, 1.0, True), one_step(step, f if f > 0 else 1.0, False)
        plain = one_step(step, 1.0, False)
        for name, p in cooled.items():
            if ".router." not in name:
                assert torch.equal(p, plain[name]), name
            elif f > 0:
                torch.testing.assert_close(p, scaled[name], rtol=1e-6, atol=1e-7)
            else:  # LR 0: the router stays as it was
                assert torch.equal(p, _model().state_dict()[name]), name
        assert any(not torch.equal(cooled[n], plain[n]) for n in cooled if ".router." in n)


def test_run_with_window_and_cooldown_logs_the_factor_and_resumes_bitwise(tmp_path, doc_globs):
    """6 steps of 4 × 64 tokens (256 a step, one bias update each): a 600-token window steps the bias
    at steps 3 and 5 (768 and 1,536 tokens); the cooldown over half the run logs its factor. The run
    resumed from its step-2 checkpoint (two steps' loads waiting in the window) ends bitwise where
    the uninterrupted one did."""
    import shutil

    cfg = tiny_cfg(tmp_path, doc_globs, f"{B}.bias_update_window_tokens=600", f"{B}.router_lr_cooldown=0.5",
                   f"{B}.bias_update_every=step", "train.checkpoint_every=2", "train.steps=6", "train.keep_last=5")
    full = run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    assert [series["router_lr_factor"][s] for s in range(6)] == [1.0, 1.0, 1.0, 2 / 3, 1 / 3, 0.0]
    ckpts = run_dir(cfg) / "checkpoints"
    meta = json.loads((ckpts / "step_00000002" / "meta.json").read_text())
    assert meta["bias_window"]["tokens"] == 512
    final = load_trained_model(ckpts / "step_00000006").model.state_dict()
    for later in ("step_00000004", "step_00000006"):  # the run as if killed after its step-2 checkpoint
        shutil.rmtree(ckpts / later)
    resumed = run_local(cfg, resume=True)
    assert resumed["loss"] == full["loss"]
    again = load_trained_model(ckpts / "step_00000006").model.state_dict()
    for key, value in final.items():
        assert torch.equal(value, again[key]), key
