"""Wiring tests of the transformer-engine path, on CPU, against a stand-in `transformer_engine` (not TE itself).

The real TE needs CUDA (its numerics are checked by the `gpu` tests); these tests check what is
ours: our weight goes into TE's weight slot only for the call and gets its gradient through
autograd, rows are padded to TE's alignment, delayed scaling gets one TE module per expert, the
model's names and state_dict stay as they are, and one TE autocast region wraps each forward.
The stand-in `te.Linear` reads its weight the way TE 2.19 does (`getattr(self, "weight")`).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from shared.config import load_config
from shared.config.precision import PrecisionConfig
from shared.model.transformer import MoETransformer
from shared.precision import experts as experts_mod
from shared.precision import te_backend
from shared.precision.experts import LowPrecisionGroupedMM, LowPrecisionLinear


class _Recipe:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeTE:
    """Records autocast depth and the calls of every `Linear`."""

    def __init__(self):
        self.depth, self.outermost_entries, self.calls = 0, 0, []
        fake = self

        class Linear(nn.Module):
            def __init__(self, in_features, out_features, bias=True, params_dtype=None, device=None):
                super().__init__()
                self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=params_dtype, device=device))

            def forward(self, inp):
                assert fake.depth > 0, "TE modules run inside a TE autocast"
                # nn.Module attribute lookup, as TE 2.19's getattr(self, "weight")
                weight = self.weight
                fake.calls.append((id(self), tuple(inp.shape), fake.depth))
                return torch.nn.functional.linear(inp, weight)

        class autocast:  # noqa: N801 — TE's name
            def __init__(self, enabled=True, recipe=None):
                self.recipe = recipe

            def __enter__(self):
                fake.outermost_entries += fake.depth == 0
                fake.depth += 1

            def __exit__(self, *exc):
                fake.depth -= 1

        self.pytorch = types.SimpleNamespace(Linear=Linear, autocast=autocast)
        names = ("Format", "DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling", "MXFP8BlockScaling",
                 "NVFP4BlockScaling", "QParams")  # fmt: skip
        self.recipe = types.SimpleNamespace(**{n: _Recipe for n in names})
        self.recipe.Format = types.SimpleNamespace(E4M3="E4M3", HYBRID="HYBRID")


@pytest.fixture
def fake_te(monkeypatch):
    fake = _FakeTE()
    root = types.ModuleType("transformer_engine")
    common = types.ModuleType("transformer_engine.common")
    common.recipe = fake.recipe
    root.pytorch, root.common = fake.pytorch, common
    monkeypatch.setitem(sys.modules, "transformer_engine", root)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", fake.pytorch)
    monkeypatch.setitem(sys.modules, "transformer_engine.common", common)
    monkeypatch.setitem(sys.modules, "transformer_engine.common.recipe", fake.recipe)
    monkeypatch.setattr(te_backend, "te_status", lambda *a: None)
    monkeypatch.setattr(experts_mod, "te_status", lambda *a: None)
    monkeypatch.setattr(te_backend, "_check_device", lambda x, w: None)  # CPU tensors stand in for CUDA ones
    return fake


@pytest.mark.parametrize("scaling,modules", [("current", 1), ("delayed", 3)])
def test_wiring_grouped_gemm_feeds_our_weight_to_a_stand_in_te_and_gets_its_gradient(fake_te, scaling, modules):
    cfg = PrecisionConfig(expert="fp8", fp8_granularity="tensor", fp8_scaling=scaling, backend="te")
    runner = te_backend.TELinearRunner(cfg, "fp8")
    gmm = LowPrecisionGroupedMM(experts_mod.gemm_recipe(cfg), 4, ((32, 16),), runner, require_te=True)
    counts = torch.tensor([5, 0, 20, 9])
    x = torch.randn(36, 16, requires_grad=True)  # 2 rows dropped by capacity
    w = nn.Parameter(torch.randn(4, 32, 16))
    y = gmm(x, w, counts)
    ref = torch.cat([x[:5] @ w[0].t(), x[5:25] @ w[2].t(), x[25:34] @ w[3].t(), x.new_zeros(2, 32)])
    torch.testing.assert_close(y, ref, rtol=2e-2, atol=8e-2)  # TE computes in bf16 (|y| up to ~10)
    y.sum().backward()
    assert w.grad is not None and (w.grad[1] == 0).all() and w.grad[0].abs().sum() > 0
    assert (x.grad[34:] == 0).all() and x.grad[:34].abs().sum() > 0
    assert [shape[0] % 16 for _, shape, _ in fake_te.calls] == [0, 0, 0], "rows padded to TE's alignment"
    assert len({module for module, _, _ in fake_te.calls}) == modules
    assert all(layer._parameters["weight"] is None for layer in runner.layers.values()), "no weight kept"


def _model(*overrides):
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])
    torch.manual_seed(0)
    return MoETransformer(cfg.model)


def test_wiring_te_backend_keeps_names_and_state_and_wraps_each_forward_in_one_stand_in_te_autocast(fake_te):
    te_model = _model("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8", "model.moe.precision.backend=te")
    emu_model = _model("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8")
    assert te_model.moe_layers()[0].experts.gmm.te is not None
    assert all(m._te["runner"] is not None for m in te_model.modules() if isinstance(m, LowPrecisionLinear))
    assert te_model.state_dict().keys() == emu_model.state_dict().keys()
    assert [n for n, _ in te_model.named_parameters()] == [n for n, _ in emu_model.named_parameters()]
    fake_te.outermost_entries = 0
    logits, _ = te_model(torch.randint(0, 256, (2, 16)))
    logits.float().pow(2).mean().backward()
    assert fake_te.outermost_entries == 1, "one TE autocast region per model forward"
    assert fake_te.depth == 0 and all(depth == 2 for _, _, depth in fake_te.calls), "GEMM autocasts nest inside it"
    grads = {n: p.grad for n, p in te_model.named_parameters()}
    assert torch.isfinite(grads["layers.1.ffn.experts.w1_EFD"]).all() and grads["layers.1.ffn.shared.w1.weight"].abs().sum() > 0
    assert te_model.state_dict().keys() == emu_model.state_dict().keys(), "TE's modules never join the state_dict"
