"""Values narrower than the queries go to SDPA unpadded where a kernel takes unequal widths, padded
where only flash would run; the outputs and gradients are the same either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from shared.config import load_config
from shared.kernels import causal_attention as ca
from shared.model.attention.mla import MultiHeadLatentAttention


def _qkv(T=40, H=3, dk=24, dv=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, H, T, w, generator=g, requires_grad=True) for w in (dk, dk, dv)]


def test_unpadded_values_through_sdpa_equal_padded_ones_values_and_grads():
    q, k, v = _qkv()
    outs = []
    for pad in (True, False):
        vv = F.pad(v, (0, q.shape[-1] - v.shape[-1])) if pad else v
        o = F.scaled_dot_product_attention(q, k, vv, is_causal=True)[..., : v.shape[-1]]
        grads = torch.autograd.grad(o.square().sum(), (q, k, v))
        outs.append((o.detach(), grads))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(outs[1][1], outs[0][1], strict=True):  # the first query's gradient is ~0: absolute
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _cuda_like(T, dk=192, dtype=torch.bfloat16):
    return SimpleNamespace(device=torch.device("cuda"), dtype=dtype, shape=(1, 16, T, dk))


@pytest.mark.parametrize("fused_takes_it, T, pads", [(True, 4096, False), (False, 4096, True), (True, 64, True),
                                                      (True, 192, True), (True, 256, False)])
def test_cuda_pads_only_where_no_fused_kernel_takes_unequal_widths_or_at_the_cudnn_suspect_lengths(
        monkeypatch, fused_takes_it, T, pads):
    asked = []
    monkeypatch.setattr(ca, "_constant_probe", lambda: lambda *a: asked.append(a) or fused_takes_it)
    assert ca.sdpa_pads_values(_cuda_like(T), T, 128) is pads
    if T % 128 == ca.CUDNN_SUSPECT_T_MOD_128:
        assert not asked  # padded without asking: the flash kernel runs there


def test_cpu_pads_narrower_values_and_equal_widths_never_pad():
    q = torch.zeros(1, 2, 8, 48)
    assert ca.sdpa_pads_values(q, 8, 32)  # CPU flash needs equal widths; math would materialise T×T
    assert not ca.sdpa_pads_values(q, 8, 48)
    assert not ca.sdpa_pads_values(_cuda_like(4096, dk=128), 4096, 128)


def test_causal_attention_passes_unpadded_values_to_sdpa_when_the_backend_takes_them(monkeypatch):
    monkeypatch.setenv(ca.SETTING_ENV, "sdpa")
    q, k, v = _qkv()
    reference = ca.causal_attention(q, k, v)
    seen = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(ca, "sdpa_pads_values", lambda *a, **kw: False)
    monkeypatch.setattr(ca.F, "scaled_dot_product_attention", lambda q_, k_, v_, **kw: seen.append(v_.shape) or real(q_, k_, v_, **kw))
    out = ca.causal_attention(q, k, v)
    assert seen == [v.shape]
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)


def test_mla_output_and_grads_equal_with_unpadded_values(monkeypatch):
    monkeypatch.setenv(ca.SETTING_ENV, "sdpa")
    cfg = load_config("configs/tiny.yaml").model
    cfg.attention.pattern = ["mla"]
    torch.manual_seed(0)
    attn = MultiHeadLatentAttention(cfg)
    assert attn.v_dim < attn.qk_dim
    x = torch.randn(2, 24, cfg.d_model, requires_grad=True)
    results = []
    for pads in (True, False):
        monkeypatch.setattr("shared.model.attention.mla.sdpa_pads_values", lambda *a, _p=pads: _p)
        monkeypatch.setattr(ca, "sdpa_pads_values", lambda *a, _p=pads: _p)
        out = attn(x)
        grads = torch.autograd.grad(out.square().sum(), [x, *attn.parameters()])
        results.append((out.detach(), grads))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_importing_the_attention_kernel_does_not_import_dynamo_or_triton():
    """TRITON_INTERPRET must still take effect when set after this module is imported."""
    import subprocess
    import sys

    code = ("import sys, shared.kernels.causal_attention, shared.model.attention.mla; "
            "print('torch._dynamo' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
