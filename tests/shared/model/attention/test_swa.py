"""SWA: w >= T is full causal attention; the blocked CPU path equals the dense masked reference."""

from __future__ import annotations

import pytest
import torch

from shared.model.attention import build_attention
from shared.model.attention.swa import auto_impl


def test_swa_with_window_at_least_T_equals_full_causal_gqa(make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg("swa")
    cfg.attention.swa.window = 50
    swa = build_attention(cfg, 0)
    gqa_cfg = make_cfg("gqa")
    gqa = build_attention(gqa_cfg, 0)
    gqa.load_state_dict(swa.state_dict())
    x = torch.randn(2, 50, cfg.d_model)
    for impl in ("blocked", "dense"):
        swa.impl = impl
        torch.testing.assert_close(swa(x), gqa(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("window", "sink_tokens", "learned_sinks", "T"),
    [(1, 0, False, 30), (7, 0, False, 100), (64, 0, False, 120), (5, 3, False, 90), (9, 2, True, 77), (200, 0, True, 65)],
)
def test_blocked_swa_matches_dense_masked_sdpa_in_outputs_and_grads(window, sink_tokens, learned_sinks, T, make_cfg):
    torch.manual_seed(window + T)
    cfg = make_cfg("swa")
    cfg.attention.swa.window = window
    cfg.attention.swa.sink_tokens = sink_tokens
    cfg.attention.swa.learned_sinks = learned_sinks
    m = build_attention(cfg, 0)
    if learned_sinks:
        with torch.no_grad():
            m.sink_logit_H.copy_(torch.randn(cfg.n_heads))
    x = torch.randn(2, T, cfg.d_model)
    outs, grads = [], []
    for impl in ("blocked", "dense"):
        m.impl = impl
        m.zero_grad()
        y = m(x)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append(y)
        grads.append([p.grad.clone() for p in m.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_small_window_differs_from_full_attention(make_cfg):
    cfg = make_cfg("swa")
    cfg.attention.swa.window = 4
    m = build_attention(cfg, 0)
    x = torch.randn(1, 40, cfg.d_model)
    y_small = m(x)
    m.window = 40
    assert (m(x) - y_small)[:, 4:].abs().max() > 1e-3
    torch.testing.assert_close(m(x)[:, :4], y_small[:, :4])


def test_auto_uses_flex_only_where_its_compiled_kernel_runs():
    assert auto_impl(True, 16) == "flex" and auto_impl(True, 128) == "flex"
    assert auto_impl(True, 8) == "blocked"  # the tiny recipe's heads: inductor refuses them
    assert auto_impl(False, 128) == "blocked"  # no FlexAttention backward on CPU


@pytest.mark.gpu
def test_narrow_heads_on_cuda_train_through_auto_and_refuse_flex(make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg("swa")  # 32 wide, 4 heads: head_dim 8
    cfg.attention.swa.window = 16
    m = build_attention(cfg, 0).cuda()
    x = torch.randn(2, 96, cfg.d_model, device="cuda")
    y_auto = m(x)
    m.impl = "dense"
    torch.testing.assert_close(y_auto, m(x), rtol=2e-3, atol=2e-3)
    m.impl = "flex"
    with pytest.raises(ValueError, match="head_dim >= 16"):
        m(x)


@pytest.mark.gpu
def test_flex_swa_matches_dense_on_cuda(make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg("swa", max_seq_len=512, d_model=64)  # heads of 16: the compiled kernel's minimum
    cfg.attention.swa.window = 48
    cfg.attention.swa.sink_tokens = 4
    cfg.attention.swa.learned_sinks = True
    m = build_attention(cfg, 0).cuda()
    with torch.no_grad():
        m.sink_logit_H.copy_(torch.randn(cfg.n_heads))
    x = torch.randn(2, 384, cfg.d_model, device="cuda")
    m.impl = "flex"
    y_flex = m(x)
    y_flex.sum().backward()
    g_flex = m.wq.weight.grad.clone()
    m.zero_grad()
    m.impl = "dense"
    y_dense = m(x)
    y_dense.sum().backward()
    torch.testing.assert_close(y_flex, y_dense, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(g_flex, m.wq.weight.grad, rtol=2e-3, atol=2e-3)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_flex_block_mask_and_sink_rescaling_match_dense_forward_on_cpu(make_cfg):
    # FlexAttention has no CPU backward, but its eager forward checks the mask_mod and the
    # sigmoid(lse - sink) rescaling that the CUDA path uses.
    torch.manual_seed(0)
    cfg = make_cfg("swa")
    cfg.attention.swa.window = 12
    cfg.attention.swa.sink_tokens = 3
    cfg.attention.swa.learned_sinks = True
    m = build_attention(cfg, 0)
    with torch.no_grad():
        m.sink_logit_H.copy_(torch.randn(cfg.n_heads))
    x = torch.randn(2, 100, cfg.d_model)
    with torch.no_grad():
        m.impl = "flex"
        y_flex = m(x)
        m.impl = "dense"
        torch.testing.assert_close(y_flex, m(x), rtol=1e-5, atol=1e-5)
