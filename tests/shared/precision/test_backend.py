"""`precision.backend`: auto emulates where transformer-engine cannot run, te says why it cannot."""

from __future__ import annotations

import pytest
import torch

from shared.config import ConfigError, load_config
from shared.model.transformer import MoETransformer
from shared.precision.experts import LowPrecisionGroupedMM, LowPrecisionLinear
from shared.precision.te_backend import te_status

no_te = pytest.mark.skipif(te_status() is None, reason="transformer-engine and CUDA are available here")


def _cfg(*overrides):
    return load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])


@no_te
@pytest.mark.parametrize("mode", ["fp8", "nvfp4"])
def test_auto_backend_emulates_where_te_cannot_run(mode):
    cfg = _cfg(f"model.moe.precision.expert={mode}", "model.moe.precision.dense=fp8")
    assert cfg.model.moe.precision.backend == "auto"
    model = MoETransformer(cfg.model)
    gmm = model.moe_layers()[0].experts.gmm
    assert isinstance(gmm, LowPrecisionGroupedMM) and gmm.te is None
    linears = [m for m in model.modules() if isinstance(m, LowPrecisionLinear)]
    assert linears and all(m._te["runner"] is None for m in linears)
    logits, _ = model(torch.randint(0, 256, (2, 16)))
    logits.sum().backward()
    assert torch.isfinite(model.moe_layers()[0].experts.w1_EFD.grad).all()


@no_te
def test_te_backend_without_cuda_or_te_fails_at_model_build_saying_why():
    cfg = _cfg("model.moe.precision.expert=fp8", "model.moe.precision.backend=te")
    with pytest.raises(RuntimeError, match=r"backend=te, but (no CUDA device is visible|transformer-engine is not installed)"):
        MoETransformer(cfg.model)


def test_te_backend_allows_a_shape_only_model_on_the_meta_device():
    cfg = _cfg("model.moe.precision.expert=fp8", "model.moe.precision.backend=te")
    with torch.device("meta"):
        model = MoETransformer(cfg.model)  # e.g. `moelab precision-report`: never runs a GEMM
    assert isinstance(model.moe_layers()[0].experts.gmm, LowPrecisionGroupedMM)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["expert=fp8", "fp8_granularity=row"], "fp8_granularity=row has no transformer-engine recipe"),
        (["expert=fp8", "fp8_grad_stochastic=true"], "fp8_grad_stochastic=true"),
        (["expert=nvfp4", "hadamard=all"], "hadamard=all"),
        (["dense=nvfp4", "hadamard_size=32"], "hadamard_size=32"),
    ],
)
def test_te_backend_rejects_recipes_without_a_te_equivalent_at_config_time(overrides, message):
    items = ["model.moe.precision.backend=te", *(f"model.moe.precision.{o}" for o in overrides)]
    with pytest.raises(ConfigError, match=message):
        _cfg(*items)
    _cfg(*items[1:])  # the emulation runs them


def test_backend_is_validated():
    with pytest.raises(ConfigError, match="backend"):
        _cfg("model.moe.precision.backend=cuda")
