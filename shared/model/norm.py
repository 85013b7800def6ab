"""RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467): x / rms(x) · g, computed in fp32.

Why our own autograd: written as tensor ops (square, mean, rsqrt, two products) autograd keeps
every intermediate and its backward makes about ten passes over the (tokens × width) activation;
torch's CPU `rms_norm` is that same decomposition. Here the forward takes the row norms in one
fused reduction (`torch.linalg.vecdot` would be a product and then a sum: one more pass and one
more full-size temporary), forms x̂ = x·r and x̂·g, and keeps x̂ and r. The backward forms
p = dy·x̂ once and takes both reductions from it (dg = Σ_rows p, and mean(dy·g·x̂) = p·g / n as a
matrix-vector product), then dx = r · (dy·g − x̂ · mean(dy·g·x̂)) in place: six passes and two
full-size temporaries, where the formula read term by term makes seven and four. The same
function to float rounding (tests/shared/model).

On CUDA, with input and gain in the same dtype, torch's own `rms_norm` runs instead: there it is
one fused kernel each way (fp32 arithmetic inside for bf16), which this CPU-shaped decomposition
cannot beat; it is the same function to float rounding (`rms_norm(..., impl="torch")`, tested on
CPU). Mixed dtypes (a bf16 input with an fp32 gain) keep ours: torch's fused path refuses them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        xf = x.float()
        rstd = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(xf.shape[-1]).add_(eps).rsqrt_()
        xhat = xf * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.x_dtype = x.dtype
        return (xhat * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy: Tensor):
        xhat, rstd, weight = ctx.saved_tensors
        dyf, w = dy.float(), weight.float()
        width = xhat.shape[-1]
        p_ND = (dyf * xhat).reshape(-1, width)  # dy·x̂: dg's summand, and dy·g·x̂ once multiplied by g
        dw = p_ND.sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
        dx = None
        if ctx.needs_input_grad[0]:
            mean_dot = (p_ND @ w).div_(width).view(rstd.shape)
            dx = (dyf * w).addcmul_(xhat, mean_dot, value=-1).mul_(rstd).to(ctx.x_dtype)
        return dx, dw, None


IMPLS = ("auto", "ours", "torch")


def rms_norm(x: Tensor, weight: Tensor, eps: float, impl: str = "auto") -> Tensor:
    """x / sqrt(mean(x²) + eps) · weight over the last dimension, in fp32, returned in x's dtype.

    `impl`: `ours` (the autograd function above), `torch` (`torch.nn.functional.rms_norm`, its
    arithmetic in fp32 for bf16/fp16 inputs), `auto` = torch's on CUDA when x and weight share a
    dtype (its fused kernels), ours otherwise."""
    if impl not in IMPLS:
        raise ValueError(f"unknown RMSNorm implementation {impl!r}; choose one of {list(IMPLS)}")
    if impl == "auto":
        impl = "torch" if x.device.type == "cuda" and x.dtype == weight.dtype else "ours"
    if impl == "torch":
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)
    return _RMSNormFunction.apply(x, weight, eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, scale: float = 1.0) -> Tensor:
        """RMSNorm(x)·scale, the scalar folded into the gain: a width-long product instead of a pass over x."""
        return rms_norm(x, self.weight if scale == 1.0 else self.weight * scale, self.eps)
