"""`model.moe.precision` reaches the model: expert (and dense) GEMMs run quantised, names unchanged."""

from __future__ import annotations

import torch

from shared.config import load_config
from shared.model.transformer import MoETransformer
from shared.precision.experts import LowPrecisionGroupedMM, LowPrecisionLinear


def _model(*overrides):
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])
    torch.manual_seed(0)
    return MoETransformer(cfg.model)


def _loss_and_grads(model, tokens):
    model.zero_grad()
    logits, _ = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_fp8_and_nvfp4_experts_train_close_to_bf16_with_the_same_weights():
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    base = _model("model.moe.precision.emulate_bf16=true")
    ref_loss, ref_grads = _loss_and_grads(base, tokens)
    for mode, tol in (("fp8", 0.1), ("nvfp4", 0.4)):
        m = _model(f"model.moe.precision.expert={mode}")
        m.load_state_dict(base.state_dict())
        assert all(layer.experts.gmm.recipe.mode == mode for layer in m.moe_layers())
        assert all(isinstance(layer.shared.w1, LowPrecisionLinear) for layer in m.moe_layers())
        assert not isinstance(m.layers[0].attn.wq, LowPrecisionLinear), "dense GEMMs stay bf16 by default"
        loss, grads = _loss_and_grads(m, tokens)
        assert torch.isfinite(loss) and abs(loss - ref_loss) < 0.05 * ref_loss
        g, r = grads["layers.1.ffn.experts.w1_EFD"], ref_grads["layers.1.ffn.experts.w1_EFD"]
        assert torch.isfinite(g).all() and 1e-4 < (g - r).norm() / r.norm() < tol


def test_dense_mode_swaps_attention_and_dense_ffn_but_not_the_head():
    m = _model("model.moe.precision.dense=fp8")
    names = {n for n, _ in m.named_parameters()}
    assert names == {n for n, _ in _model().named_parameters()}
    assert isinstance(m.layers[0].attn.wq, LowPrecisionLinear)
    assert isinstance(m.layers[0].ffn.w1, LowPrecisionLinear)
    assert not isinstance(m.lm_head, LowPrecisionLinear)
    assert not isinstance(m.moe_layers()[0].experts.gmm, LowPrecisionGroupedMM)
    assert not isinstance(m.moe_layers()[0].shared.w1, LowPrecisionLinear)
