"""MLA equals a straightforward unfused implementation, and its absorbed (latent-space) form too."""

from __future__ import annotations

import math

import torch

from shared.model.attention import build_attention
from shared.model.attention.gqa import kv_cache_bytes_per_token_gqa
from shared.model.attention.mla import kv_cache_bytes_per_token_mla
from shared.model.rope import rope_frequencies, rotate_half


def _unfused_mla(m, x):
    """DeepSeek-V2 §2.1 written out head by head with explicit softmax; no SDPA, no shared code paths."""
    B, T, _ = x.shape
    H, n, r, v = m.n_heads, m.nope, m.rope_dim, m.v_dim
    cos, sin = rope_frequencies(r, T, 10000.0)

    def rope(t):
        return t * cos + rotate_half(t) * sin

    c_q = m.wq_a(x)
    c_q = c_q * torch.rsqrt(c_q.pow(2).mean(-1, keepdim=True) + m.q_norm.eps) * m.q_norm.weight
    q_all = m.wq_b(c_q).view(B, T, H, n + r)
    ckv_kr = m.wkv_a(x)
    c_kv, k_r = ckv_kr[..., : m.kv_lora_rank], ckv_kr[..., m.kv_lora_rank :]
    c_kv = c_kv * torch.rsqrt(c_kv.pow(2).mean(-1, keepdim=True) + m.kv_norm.eps) * m.kv_norm.weight
    k_r = rope(k_r)
    kv_all = m.wkv_b(c_kv).view(B, T, H, n + v)
    outs = []
    mask = torch.full((T, T), float("-inf")).triu(1)
    for h in range(H):
        q_h = torch.cat([q_all[:, :, h, :n], rope(q_all[:, :, h, n:])], dim=-1)
        k_h = torch.cat([kv_all[:, :, h, :n], k_r], dim=-1)
        v_h = kv_all[:, :, h, n:]
        att = torch.softmax(q_h @ k_h.transpose(1, 2) / math.sqrt(n + r) + mask, dim=-1)
        outs.append(att @ v_h)
    return m.wo(torch.cat(outs, dim=-1))


def test_mla_matches_unfused_reference_and_absorbed_form(make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg("mla")
    m = build_attention(cfg, 0)
    x = torch.randn(2, 21, cfg.d_model)
    ref = _unfused_mla(m, x)
    torch.testing.assert_close(m(x), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.forward_absorbed(x), ref, rtol=1e-5, atol=1e-5)


def test_mla_without_query_compression_runs_and_scale_uses_full_qk_width(make_cfg):
    cfg = make_cfg("mla")
    cfg.attention.mla.q_lora_rank = 0
    m = build_attention(cfg, 0)
    assert not hasattr(m, "wq_a")
    assert m.softmax_scale == (cfg.attention.mla.qk_nope_head_dim + cfg.attention.mla.qk_rope_head_dim) ** -0.5
    x = torch.randn(1, 9, cfg.d_model)
    torch.testing.assert_close(m(x), m.forward_absorbed(x), rtol=1e-5, atol=1e-5)


def test_kv_cache_bytes_per_token_deepseek_v3_vs_gqa():
    # DeepSeek-V3: kv_lora_rank 512 + rope 64 = 576 values (1152 B in bf16) per token per layer,
    # against 2 * 128 heads * 128 dims for MHA with the same heads, and 2 * 8 * 128 for GQA-8.
    assert kv_cache_bytes_per_token_mla(512, 64) == 1152
    assert kv_cache_bytes_per_token_gqa(128, 128) == 65536
    assert kv_cache_bytes_per_token_gqa(8, 128) == 4096


def test_mla_values_and_gradients_are_the_same_on_both_attention_kernels(make_cfg, monkeypatch):
    """Unpadded values on the blocked CPU kernel, padded ones on SDPA: the same layer either way."""
    from shared.kernels.causal_attention import SETTING_ENV

    torch.manual_seed(0)
    cfg = make_cfg("mla")
    m = build_attention(cfg, 0)
    x = torch.randn(2, 37, cfg.d_model)
    results = {}
    for setting in ("blocked", "sdpa"):
        monkeypatch.setenv(SETTING_ENV, setting)
        m.zero_grad(set_to_none=True)
        out = m(x)
        out.square().sum().backward()
        results[setting] = (out.detach(), [p.grad.clone() for p in m.parameters()])
    torch.testing.assert_close(results["blocked"][0], results["sdpa"][0], rtol=1e-5, atol=1e-5)
    for a, b in zip(results["blocked"][1], results["sdpa"][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
