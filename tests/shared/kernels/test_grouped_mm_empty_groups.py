"""An expert that receives no tokens gets a zero weight gradient from every grouped GEMM kernel."""

from __future__ import annotations

import pytest
import torch

from shared.kernels import grouped_mm


@pytest.mark.parametrize("backend", ["loop", "grouped_mm"])
def test_empty_groups_get_zero_weight_gradients_on_cpu(backend):
    x = torch.randn(48, 32, requires_grad=True)
    w = torch.randn(4, 16, 32, requires_grad=True)
    grouped_mm(x, w, torch.tensor([20, 0, 28, 0]), backend).square().sum().backward()
    assert not w.grad[1].any() and not w.grad[3].any() and w.grad[0].any()


@pytest.mark.gpu
def test_grouped_mm_weight_gradient_of_an_empty_group_is_zero_on_recycled_memory():
    # torch._grouped_mm leaves what it does not write uninitialised; after the caching allocator
    # hands back a block that held NaNs, an expert with no tokens must still get a zero gradient
    n_experts, n_out, n_in = 4, 128, 256
    for _ in range(3):
        junk = torch.full((n_experts, n_out, n_in), float("nan"), device="cuda", dtype=torch.bfloat16)
        del junk
        x = torch.randn(96, n_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(n_experts, n_out, n_in, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        counts = torch.tensor([40, 0, 56, 0], device="cuda")
        grouped_mm(x, w, counts, "grouped_mm").float().square().sum().backward()
        assert torch.isfinite(w.grad).all() and torch.isfinite(x.grad).all()
        assert not w.grad[1].any() and not w.grad[3].any()
