"""Under autocast the experts' grouped GEMMs run in the autocast dtype, like every other GEMM."""

from __future__ import annotations

import pytest
import torch

from shared.kernels import grouped_mm


@pytest.mark.parametrize("backend", ["loop", "grouped_mm"])
def test_grouped_gemm_under_bf16_autocast_runs_in_bf16_and_returns_fp32_weight_grads(backend):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(48, 32, generator=gen, requires_grad=True)
    w = torch.randn(3, 16, 32, generator=gen, requires_grad=True)
    counts = torch.tensor([20, 0, 28])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = grouped_mm(x, w, counts, backend)
        y_bf16_input = grouped_mm(x.bfloat16(), w, counts, backend)  # a bf16 activation meets fp32 weights
    assert y.dtype == torch.bfloat16 and y_bf16_input.dtype == torch.bfloat16
    ref = grouped_mm(x.detach().bfloat16(), w.detach().bfloat16(), counts, backend)
    assert torch.equal(y, ref)
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


def test_grouped_gemm_without_autocast_keeps_its_inputs_dtype():
    x, w = torch.randn(8, 16), torch.randn(2, 8, 16)
    assert grouped_mm(x, w, torch.tensor([3, 5]), "loop").dtype == torch.float32
