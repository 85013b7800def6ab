"""RMSNorm's one-node autograd computes what the tensor-op form computes, forward and backward."""

from __future__ import annotations

import pytest
import torch

from shared.model.norm import RMSNorm


def _reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


@pytest.mark.parametrize("shape", [(4, 33, 64), (7, 256)])
def test_rms_norm_matches_the_tensor_op_form_and_its_gradients(shape):
    g = torch.Generator().manual_seed(0)
    norm = RMSNorm(shape[-1], eps=1e-5)
    with torch.no_grad():
        norm.weight.add_(0.3 * torch.randn(shape[-1], generator=g))
    x = (3 * torch.randn(*shape, generator=g)).requires_grad_()
    dy = torch.randn(*shape, generator=g)
    ours, ref = norm(x), _reference(x, norm.weight, 1e-5)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)
    for a, b in zip(torch.autograd.grad(ours, (x, norm.weight), dy), torch.autograd.grad(ref, (x, norm.weight), dy),
                    strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    (dw,) = torch.autograd.grad(norm(x.detach()), (norm.weight,), dy)  # no input gradient asked
    (dw_ref,) = torch.autograd.grad(_reference(x.detach(), norm.weight, 1e-5), (norm.weight,), dy)
    torch.testing.assert_close(dw, dw_ref, atol=1e-5, rtol=1e-4)


def test_rms_norm_keeps_bf16_activations_bf16_and_computes_in_fp32():
    norm = RMSNorm(32)
    x = torch.randn(8, 32).bfloat16().requires_grad_()
    y = norm(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), _reference(x, norm.weight, 1e-6).float(), atol=1e-2, rtol=1e-2)
    y.float().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and norm.weight.grad.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_rms_norm_computes_what_ours_computes_values_and_gradients(dtype):
    """The CUDA path (torch's fused `rms_norm`) checked on CPU against ours, same dtype for x and gain."""
    from shared.model.norm import rms_norm

    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 17, 96, generator=g).to(dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(96, generator=g)).to(dtype).requires_grad_()
    results = []
    for impl in ("ours", "torch"):
        y = rms_norm(x, w, 1e-6, impl=impl)
        upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
        results.append((y, *torch.autograd.grad(y, (x, w), upstream)))
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}[dtype]
    for ours, theirs in zip(*results, strict=True):
        assert ours.dtype == theirs.dtype == dtype
        torch.testing.assert_close(theirs, ours, **tol)


def test_auto_takes_torch_rms_norm_only_on_cuda_with_matching_dtypes(monkeypatch):
    from shared.model import norm

    calls = []
    monkeypatch.setattr(norm.torch.nn.functional, "rms_norm", lambda *a: calls.append(a) or a[0])
    norm.rms_norm(torch.ones(2, 4), torch.ones(4), 1e-6)
    assert not calls  # CPU: ours
    with pytest.raises(ValueError, match="unknown RMSNorm implementation"):
        norm.rms_norm(torch.ones(2, 4), torch.ones(4), 1e-6, impl="apex")
