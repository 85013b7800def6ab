"""The CUDA sides of the eager-waste changes, for the GPU checks' `gpu_tests` step (skipped without
CUDA; their CPU twins are in test_histogram_and_combine, test_unpadded_values, test_linear_cross_entropy,
tests/shared/model/test_norm and tests/shared/optim/test_adamw_fused)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu


def test_gather_combine_on_cuda_is_bitwise_deterministic_and_matches_index_add():
    from shared.kernels import moe_experts_forward

    g = torch.Generator().manual_seed(0)
    T, D, Fh, E, K = 1024, 256, 128, 16, 4
    x = torch.randn(T, D, generator=g).cuda().bfloat16().requires_grad_()
    w1, w3 = (torch.randn(E, Fh, D, generator=g).div(D ** 0.5).cuda().bfloat16().requires_grad_() for _ in range(2))
    w2 = torch.randn(E, D, Fh, generator=g).div(Fh ** 0.5).cuda().bfloat16().requires_grad_()
    w, idx = torch.randn(T, E, generator=g).softmax(-1).topk(K, dim=-1)
    idx, w = idx.cuda(), w.cuda()
    runs = []
    for combine in ("gather", "gather", "index_add"):
        out, _ = moe_experts_forward(x, idx, w, w1, w3, w2, backend="grouped_mm", combine=combine)
        runs.append((out, *torch.autograd.grad(out.float().square().sum(), (x, w1))))
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
    for a, b in zip(runs[0], runs[2], strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("T", [4096, 1024, 64])
def test_unpadded_mla_values_on_cuda_equal_padded(T):
    from shared.kernels.causal_attention import sdpa_pads_values

    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 4, T, 192, generator=g).cuda().bfloat16().requires_grad_() for _ in range(2))
    v = torch.randn(1, 4, T, 128, generator=g).cuda().bfloat16().requires_grad_()
    padded = F.scaled_dot_product_attention(q, k, F.pad(v, (0, 64)), is_causal=True)[..., :128]
    if T % 128 == 64:
        assert sdpa_pads_values(q, T, 128)
    if not sdpa_pads_values(q, T, 128):
        unpadded = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(unpadded, padded, rtol=2e-2, atol=2e-2)
        ga = torch.autograd.grad(unpadded.float().sum(), (q, k, v))
        gb = torch.autograd.grad(padded.float().sum(), (q, k, v))
        for a, b in zip(ga, gb, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=5e-2, atol=5e-2)


def test_bf16_linear_cross_entropy_on_cuda_equals_the_plain_path():
    from shared.kernels.linear_cross_entropy import linear_cross_entropy

    g = torch.Generator().manual_seed(2)
    h = torch.randn(4096, 512, generator=g).cuda().bfloat16().requires_grad_()
    w = (torch.randn(32768, 512, generator=g) * 0.05).cuda().bfloat16().requires_grad_()
    y = torch.randint(0, 32768, (4096,), generator=g).cuda()
    ref = F.cross_entropy(F.linear(h, w).float(), y)
    ref_g = torch.autograd.grad(ref, (h, w))
    loss = linear_cross_entropy(h, w, y, chunk_rows=1024)
    got_g = torch.autograd.grad(loss, (h, w))
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(got_g, ref_g, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=3e-2, atol=1e-4)


def test_rms_norm_on_cuda_takes_torch_and_equals_ours():
    from shared.model.norm import rms_norm

    x = torch.randn(8, 64, 2560, device="cuda", requires_grad=True)
    w = torch.randn(2560, device="cuda", requires_grad=True)
    a = rms_norm(x, w, 1e-6)
    b = rms_norm(x, w, 1e-6, impl="ours")
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_adamw_auto_is_fused_on_cuda():
    from shared.optim.optimizer import adamw_fused

    assert adamw_fused("auto", [torch.zeros(2, device="cuda")])
