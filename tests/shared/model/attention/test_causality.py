"""Every registered attention is causal: changing tokens after position t leaves outputs <= t unchanged."""

from __future__ import annotations

import pytest
import torch

from shared.model.attention import ATTENTION_REGISTRY, build_attention


@pytest.mark.parametrize("kind", sorted(ATTENTION_REGISTRY))
def test_outputs_up_to_t_ignore_tokens_after_t(kind, make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg(kind)
    attn = build_attention(cfg, 0).eval()
    T, t = 40, 17
    x = torch.randn(2, T, cfg.d_model)
    x2 = x.clone()
    x2[:, t + 1 :] = torch.randn(2, T - t - 1, cfg.d_model) * 3.0
    with torch.no_grad():
        y, y2 = attn(x), attn(x2)
    assert y.shape == x.shape
    torch.testing.assert_close(y[:, : t + 1], y2[:, : t + 1], rtol=1e-5, atol=1e-5)
    # ... and the change is visible after t, so the test can fail.
    assert (y[:, t + 1 :] - y2[:, t + 1 :]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", sorted(ATTENTION_REGISTRY))
def test_gradient_of_output_t_is_zero_wrt_later_inputs(kind, make_cfg):
    torch.manual_seed(1)
    cfg = make_cfg(kind)
    attn = build_attention(cfg, 0)
    T, t = 24, 9
    x = torch.randn(1, T, cfg.d_model, requires_grad=True)
    attn(x)[0, t].sum().backward()
    assert x.grad[0, t + 1 :].abs().max() == 0
    assert x.grad[0, : t + 1].abs().max() > 0
