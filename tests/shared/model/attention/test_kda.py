"""KDA: the chunked parallel form equals the naive recurrence (outputs and grads, fp32, 1e-5)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.model.attention import build_attention
from shared.model.attention.kda_ops import fla_chunk_kda_available, kda_chunked, kda_fla, kda_recurrent


def _inputs(B=2, H=3, T=45, K=8, V=6, seed=0, decay=3.0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, H, T, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, H, T, K, generator=g), dim=-1)
    v = torch.randn(B, H, T, V, generator=g)
    logdecay = -torch.rand(B, H, T, K, generator=g) * decay
    beta = torch.rand(B, H, T, generator=g)
    return [t.requires_grad_() for t in (q, k, v, logdecay, beta)]


@pytest.mark.parametrize("chunk_size", [1, 4, 16, 64])
@pytest.mark.parametrize("decay", [0.05, 3.0, 30.0])
def test_chunked_equals_recurrent_in_outputs_and_grads(chunk_size, decay):
    inputs = _inputs(decay=decay, seed=chunk_size)
    scale = 8**-0.5
    w = torch.randn(2, 3, 45, 6)
    ref = kda_recurrent(*inputs, scale)
    ref_grads = torch.autograd.grad((ref * w).sum(), inputs)
    out = kda_chunked(*inputs, scale, chunk_size)
    grads = torch.autograd.grad((out * w).sum(), inputs)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_kda_layer_chunked_and_recurrent_paths_agree(make_cfg):
    torch.manual_seed(0)
    cfg = make_cfg("kda")
    cfg.attention.kda.chunk_size = 8
    m = build_attention(cfg, 0)
    x = torch.randn(2, 29, cfg.d_model)
    m.impl = "chunked"
    y_c = m(x)
    m.impl = "recurrent"
    torch.testing.assert_close(y_c, m(x), rtol=1e-5, atol=1e-5)


def test_delta_rule_retrieves_a_stored_value_without_decay():
    # One key written with beta = 1 and no decay is read back exactly by the same query.
    K = V = 4
    k = torch.zeros(1, 1, 2, K)
    k[0, 0, 0, 1] = 1.0
    q = k.clone()
    q[0, 0, 1] = k[0, 0, 0]
    v = torch.zeros(1, 1, 2, V)
    v[0, 0, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = kda_chunked(q, k, v, torch.zeros(1, 1, 2, K), torch.tensor([[[1.0, 0.0]]]), 1.0, 2)
    torch.testing.assert_close(out[0, 0, 1], v[0, 0, 0])


@pytest.mark.gpu
def test_fla_kernel_matches_ours_on_cuda():
    if not fla_chunk_kda_available():
        pytest.skip("flash-linear-attention is not installed (pip install '.[gpu]')")
    inputs = [t.detach().cuda() for t in _inputs(T=256, K=64, V=64)]
    ours = kda_chunked(*inputs, 64**-0.5, 64)
    theirs = kda_fla(*inputs, 64**-0.5)
    torch.testing.assert_close(theirs.float(), ours, rtol=2e-3, atol=2e-3)


def test_fla_fallback_logs_once_why_it_falls_back(monkeypatch, caplog):
    import sys

    from shared.model.attention import kda_ops

    monkeypatch.setitem(sys.modules, "fla", None)  # `import fla…` raises ImportError
    monkeypatch.setitem(sys.modules, "fla.ops", None)
    monkeypatch.setitem(sys.modules, "fla.ops.kda", None)
    kda_ops.fla_chunk_kda_available.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="shared.model.attention.kda_ops"):
            assert not kda_ops.fla_chunk_kda_available()
            assert not kda_ops.fla_chunk_kda_available()
    finally:
        kda_ops.fla_chunk_kda_available.cache_clear()
    records = [r for r in caplog.records if r.name == "shared.model.attention.kda_ops"]
    assert len(records) == 1
    assert "ModuleNotFoundError" in records[0].getMessage() and "kda_chunked" in records[0].getMessage()
