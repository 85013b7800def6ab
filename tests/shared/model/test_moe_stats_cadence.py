"""Aux losses at coefficient 0 are not computed, full router statistics only when asked; the loss,
the gradients and the bias update are the same either way."""

from __future__ import annotations

import pytest
import torch

import shared.model.moe as moe_module
from shared.config import load_config
from shared.model import MoETransformer


def _model(**balance):
    overrides = [f"model.moe.balance.{k}={v}" for k, v in balance.items()]
    cfg = load_config("configs/tiny.yaml", overrides).model
    torch.manual_seed(0)
    return MoETransformer(cfg), cfg


def _step(model, cfg, full: bool):
    model.zero_grad(set_to_none=True)
    model.set_full_stats(full)
    tokens = torch.randint(0, cfg.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    _, aux = model(tokens[:, :-1], tokens[:, 1:])
    (aux["lm_loss"] + aux["aux_loss"]).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    loads = [layer.load_accum_E.clone() for layer in model.moe_layers()]
    for layer in model.moe_layers():
        layer.load_accum_E.zero_()
    return aux, grads, loads


@pytest.mark.parametrize("coefs", [dict(seq_aux_alpha=0.0, switch_aux_alpha=0.0, z_loss_coef=0.0),
                                   dict(seq_aux_alpha=1e-3, switch_aux_alpha=0.0, z_loss_coef=1e-3)])
def test_loss_grads_and_loads_equal_with_and_without_full_stats(coefs):
    model, cfg = _model(**coefs)
    aux_full, grads_full, loads_full = _step(model, cfg, full=True)
    aux_lean, grads_lean, loads_lean = _step(model, cfg, full=False)
    assert torch.equal(aux_full["lm_loss"], aux_lean["lm_loss"])
    assert torch.equal(aux_full["aux_loss"], aux_lean["aux_loss"])
    assert grads_full.keys() == grads_lean.keys()
    for name in grads_full:
        assert torch.equal(grads_full[name], grads_lean[name]), name
    assert all(torch.equal(a, b) for a, b in zip(loads_full, loads_lean, strict=True))


def test_full_stats_report_every_statistic_and_lean_ones_what_the_trainer_reads_each_step():
    model, cfg = _model(seq_aux_alpha=0.0, switch_aux_alpha=0.0, z_loss_coef=0.0)
    aux, _, _ = _step(model, cfg, full=True)
    full = aux["layers"][cfg.first_k_dense]
    assert {"max_vio", "dead_experts", "bias_max", "bias_min", "router_entropy", "tokens_per_expert",
            "seq_aux_loss", "switch_aux_loss", "z_loss", "dropped_tokens"} <= set(full)
    aux, _, _ = _step(model, cfg, full=False)
    lean = aux["layers"][cfg.first_k_dense]
    assert set(lean) == {"tokens_per_expert", "router_entropy", "dropped_tokens"}
    torch.testing.assert_close(lean["router_entropy"], full["router_entropy"])
    assert torch.equal(lean["tokens_per_expert"], full["tokens_per_expert"])


def test_zero_coefficient_losses_are_not_computed_on_lean_steps(monkeypatch):
    calls = []
    for name in ("seq_aux_loss", "switch_aux_loss", "router_z_loss"):
        real = getattr(moe_module, name)
        monkeypatch.setattr(moe_module, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    model, cfg = _model(seq_aux_alpha=1e-4, switch_aux_alpha=0.0, z_loss_coef=0.0)
    _step(model, cfg, full=False)
    assert set(calls) == {"seq_aux_loss"}
    calls.clear()
    _step(model, cfg, full=True)
    assert set(calls) == {"seq_aux_loss", "switch_aux_loss", "router_z_loss"}
