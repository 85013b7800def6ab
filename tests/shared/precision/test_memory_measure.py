"""Memory measured from the tensors: what autograd holds for the backward (saved tensors and tensors a
custom function keeps on its context, each storage once, parameters excluded) and the experts'
resident bytes (master weights, cached fp8 layouts)."""

from __future__ import annotations

import torch

from shared.config import load_config
from shared.model.transformer import MoETransformer
from shared.precision.memory_measure import held_for_backward, resident_expert_bytes
from shared.precision.weight_cache import WeightQuantCache


class _KeepsOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        doubled = x * 2
        ctx.kept = (doubled, doubled[:1])  # a tensor and a view of it: one storage, counted once
        return x * 3

    @staticmethod
    def backward(ctx, dy):
        return dy * 3


def test_held_for_backward_counts_saved_and_context_tensors_once_and_not_parameters():
    w = torch.nn.Parameter(torch.randn(64, 32))
    x = torch.randn(16, 64)
    _, held = held_for_backward(lambda: x @ w, exclude=[w])
    assert held == x.numel() * 4  # mm saves x and w; w is resident, not held
    _, held = held_for_backward(lambda: _KeepsOnCtx.apply(x.requires_grad_()))
    assert held == x.numel() * 4  # x * 2 kept on the context, its view not counted twice
    _, held = held_for_backward(lambda: (x.detach() + 1).sum())
    assert held == 0


def test_resident_expert_bytes_are_the_routed_experts_master_weights_and_their_cached_layouts():
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.moe.precision.expert=fp8",
                                            "model.moe.precision.fp8_granularity=row", "model.moe.precision.backend=emulate"])
    model = MoETransformer(cfg.model)
    experts = [m for m in model.modules() if hasattr(m, "gmm")]
    master = sum(p.numel() * 4 for m in experts for p in m.parameters(recurse=False))
    assert resident_expert_bytes(model) == {"master": master, "fp8_cache": 0}
    cache: WeightQuantCache = experts[0].gmm.weight_cache
    cache.get("w", experts[0].w2_EDF, lambda t: (t.to(torch.float8_e4m3fn), t.new_ones(t.shape[:-1])))
    w2 = experts[0].w2_EDF
    assert resident_expert_bytes(model)["fp8_cache"] == w2.numel() + 4 * w2.numel() // w2.shape[-1]
