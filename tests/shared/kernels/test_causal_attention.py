"""The blocked-scores CPU attention computes what SDPA's causal attention computes, and is taken only where it should be."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.kernels import causal_attention as ca


def _qkv(B, H, Hkv, T, dk, dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, dk, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, T, dk, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, T, dv, generator=g, requires_grad=True)
    return q, k, v


def _reference(q, k, v, scale):
    """Causal attention written out: scores, mask, softmax, weighted values (float64)."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("T", [1, 5, 128, 200, 300], ids=lambda t: f"T{t}")  # inside one block, at its edge, ragged
@pytest.mark.parametrize("heads,kv_heads,dk,dv", [(4, 4, 24, 16), (4, 4, 16, 16), (4, 2, 16, 24)],
                         ids=["v-narrower", "v-equal", "gqa-v-wider"])
def test_blocked_path_matches_the_written_out_attention_values_and_gradients(monkeypatch, T, heads, kv_heads, dk, dv):
    monkeypatch.setenv(ca.SETTING_ENV, "blocked")
    q, k, v = _qkv(2, heads, kv_heads, T, dk, dv)
    out = ca.causal_attention(q, k, v, 0.3)
    ref = _reference(q, k, v, 0.3)
    assert out.shape == (2, heads, T, dv) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    ours = torch.autograd.grad(out, (q, k, v), g)
    theirs = torch.autograd.grad(ref, (q, k, v), g.double())
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("setting", ["blocked", "sdpa"])
def test_both_paths_agree_with_sdpa(monkeypatch, setting):
    monkeypatch.setenv(ca.SETTING_ENV, setting)
    q, k, v = _qkv(2, 3, 3, 260, 20, 12)
    out = ca.causal_attention(q, k, v)  # default scale dk^-1/2, as SDPA's
    sdpa = F.scaled_dot_product_attention(q, k, F.pad(v, (0, 8)), is_causal=True)[..., :12]
    torch.testing.assert_close(out, sdpa, rtol=1e-5, atol=1e-5)


def test_auto_takes_the_blocked_path_only_for_short_fp32_cpu_sequences_with_narrower_values(monkeypatch):
    monkeypatch.setenv(ca.SETTING_ENV, "auto")
    q = torch.zeros(1, 1, 1, 48)
    assert ca.blocked_applies(q, ca.BLOCKED_MAX_T, 32)
    assert not ca.blocked_applies(q, ca.BLOCKED_MAX_T + 1, 32)  # long: the flash kernel, no T² probabilities kept
    assert not ca.blocked_applies(q, 64, 48)  # equal widths: flash pads nothing and was as fast
    assert not ca.blocked_applies(q.bfloat16(), 64, 32)
    monkeypatch.setenv(ca.SETTING_ENV, "sdpa")
    assert not ca.blocked_applies(q, 64, 32)
    monkeypatch.setenv(ca.SETTING_ENV, "blocked")
    assert ca.blocked_applies(q, 4 * ca.BLOCKED_MAX_T, 48)


def test_the_blocked_path_is_what_runs_when_it_applies(monkeypatch):
    """Not a silent fallback: under `auto` at a short length no SDPA call is made."""
    monkeypatch.setenv(ca.SETTING_ENV, "auto")
    calls = []
    monkeypatch.setattr(ca.F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1))
    q, k, v = _qkv(1, 2, 2, 64, 8, 6)
    ca.causal_attention(q, k, v).sum().backward()
    assert calls == [] and q.grad is not None


def test_bad_settings_and_shapes_are_refused(monkeypatch):
    monkeypatch.setenv(ca.SETTING_ENV, "fast")
    with pytest.raises(ValueError, match="MOELAB_CPU_ATTENTION='fast'"):
        ca.blocked_applies(torch.zeros(1, 1, 1, 8), 8, 8)
    monkeypatch.setenv(ca.SETTING_ENV, "auto")
    q, k, v = _qkv(1, 3, 2, 8, 4, 4)
    with pytest.raises(ValueError, match="3 query heads cannot share 2"):
        ca.causal_attention(q, k, v)
    with pytest.raises(ValueError, match="expects q, k"):
        ca.causal_attention(q, k[:, :, :4], v)
