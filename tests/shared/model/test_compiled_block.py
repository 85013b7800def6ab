"""The MoE transformer block traces whole under torch._dynamo (0 graph breaks: no host syncs left
in routing, counts, dispatch on the `grouped_mm` backend, aux losses or statistics), and the
compiled block computes what the eager one does."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.model import MoETransformer


def _block(kind: str, **moe):
    cfg = load_config("configs/tiny.yaml", ["model.moe.dispatch_backend=grouped_mm",
                                            *[f"model.moe.{k}={v}" for k, v in moe.items()]]).model
    cfg.attention.pattern = [kind]
    torch.manual_seed(0)
    model = MoETransformer(cfg).to(torch.bfloat16)  # CPU `_grouped_mm` traces in bf16 (its meta kernel's rule)
    block = model.layers[cfg.first_k_dense]
    assert block.is_moe
    return block, cfg


@pytest.mark.parametrize("kind", ["gqa", "mla"])
@pytest.mark.parametrize("full_stats", [True, False])
def test_moe_block_has_no_graph_breaks(kind, full_stats):
    block, cfg = _block(kind)
    block.ffn.full_stats = full_stats
    x = torch.randn(2, 16, cfg.d_model, dtype=torch.bfloat16, requires_grad=True)
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0, [r.reason for r in explanation.break_reasons]
    assert explanation.graph_count == 1


def test_moe_block_with_every_aux_loss_has_no_graph_breaks():
    """Dropless (the recipes' setting); a capacity keeps a data-dependent number of rows, which
    dynamo cannot trace without a break."""
    block, cfg = _block("mla", **{"balance.switch_aux_alpha": 0.01, "balance.z_loss_coef": 0.001})
    explanation = torch._dynamo.explain(block)(torch.randn(2, 16, cfg.d_model, dtype=torch.bfloat16))
    assert explanation.graph_break_count == 0, [r.reason for r in explanation.break_reasons]


def test_compiled_block_matches_eager_output_stats_and_grads():
    block, cfg = _block("mla")
    x = torch.randn(2, 16, cfg.d_model, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(3))
    results = []
    for fn in (block, torch.compile(block, backend="aot_eager", fullgraph=True)):
        block.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y, stats = fn(xi)
        (y.float().square().mean() + stats["aux_loss"]).backward()
        results.append((y.detach(), stats["tokens_per_expert"], xi.grad, [p.grad.clone() for p in block.parameters()]))
    (y0, load0, dx0, g0), (y1, load1, dx1, g1) = results
    assert torch.equal(load0, load1)
    torch.testing.assert_close(y1, y0, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dx1, dx0, rtol=2e-2, atol=2e-2)
    for a, b in zip(g1, g0, strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)
