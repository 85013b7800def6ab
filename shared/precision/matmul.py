"""Low-precision linear layers by emulation: quantise in the forward *and* both backward GEMMs.

Why emulation: the CPU has no fp8/fp4 (or even bf16) GEMM units, but training dynamics depend
only on the values the GEMMs see. Each of the three GEMMs of a linear layer quantises both
operands along its own reduction dimension with the recipe's formats and scales (so the weight
is quantised along K for the forward GEMM and along N for Dgrad, the activation along K for the
forward and along tokens for Wgrad, exactly as TE's "rowwise"/"columnwise" copies), optionally
after a random Hadamard transform, then multiplies the dequantised values in fp32. The result is
what a hardware block-scaled GEMM with fp32 accumulation would produce, up to accumulation order.
"""

from __future__ import annotations

import torch

from shared.precision.hadamard import hadamard_last_dim
from shared.precision.recipe import GemmRecipe
from shared.precision.scaling import QuantSpec, fake_quantize


def _quantised_gemm(
    a: torch.Tensor, bt: torch.Tensor, sa: QuantSpec, sb: QuantSpec, hadamard: bool, recipe: GemmRecipe
) -> torch.Tensor:
    """a (M, K) @ bt (N, K)ᵀ with both operands quantised along K; fp32 result."""
    a, bt = a.float(), bt.float()
    if hadamard:
        a = hadamard_last_dim(a, recipe.hadamard_size, recipe.seed)
        bt = hadamard_last_dim(bt, recipe.hadamard_size, recipe.seed)
    aq, _ = fake_quantize(a, sa)
    bq, _ = fake_quantize(bt, sb)
    return aq @ bq.t()


class _LowPrecisionLinear(torch.autograd.Function):
    """Y = X Wᵀ with X (M, K), W (N, K); quantised operands in all three GEMMs."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, recipe: GemmRecipe) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.recipe = recipe
        y = _quantised_gemm(x, w, recipe.x, recipe.w, recipe.hadamard == "all", recipe)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, w = ctx.saved_tensors
        r: GemmRecipe = ctx.recipe
        dx = dw = None
        if ctx.needs_input_grad[0]:  # Dgrad: dX = dY W, reduction over N
            dx = _quantised_gemm(dy, w.t(), r.grad, r.w, r.hadamard == "all", r).to(x.dtype)
        if ctx.needs_input_grad[1]:  # Wgrad: dW = dYᵀ X, reduction over tokens
            dw = _quantised_gemm(dy.t(), x.t(), r.grad, r.x, r.hadamard in ("wgrad", "all"), r).to(w.dtype)
        return dx, dw, None


def lp_linear(x: torch.Tensor, w: torch.Tensor, recipe: GemmRecipe) -> torch.Tensor:
    """x (..., K) @ w (N, K)ᵀ under `recipe`; an inactive recipe (plain bf16) is F.linear."""
    if not recipe.active:
        return torch.nn.functional.linear(x, w)
    lead = x.shape[:-1]
    y = _LowPrecisionLinear.apply(x.reshape(-1, x.shape[-1]), w, recipe)
    return y.reshape(*lead, w.shape[0])


def lp_matmul(x: torch.Tensor, w: torch.Tensor, recipe: GemmRecipe) -> torch.Tensor:
    """x (..., K) @ w (K, N) under `recipe` (the expert-weight layout of grouped GEMMs)."""
    return lp_linear(x, w.t(), recipe)


def lp_grouped_linear(
    x: torch.Tensor, w: torch.Tensor, counts: list[int] | torch.Tensor, recipe: GemmRecipe
) -> torch.Tensor:
    """Grouped GEMM in `nn.Linear` layout: rows of x (A, K) sorted by expert, `counts[e]` rows for
    w[e] (N, K); -> (A, N). Rows past sum(counts) (dropped by capacity) give zeros.

    Each expert's block is its own GEMM with its own scales, as in a hardware grouped GEMM; the
    layout matches `shared.kernels.grouped_mm` so the model can swap one call for the other.
    """
    counts = [int(c) for c in (counts.tolist() if torch.is_tensor(counts) else counts)]
    if sum(counts) > x.shape[0] or len(counts) != w.shape[0]:
        raise ValueError(
            f"counts {counts} must have one entry per expert ({w.shape[0]}) and cover at most {x.shape[0]} rows"
        )
    outs = [lp_linear(chunk, w[e], recipe) for e, chunk in enumerate(torch.split(x[: sum(counts)], counts)) if len(chunk)]
    rest = x.shape[0] - sum(counts)
    if rest or not outs:
        outs.append(x.new_zeros(rest, w.shape[1]))
    return torch.cat(outs)


def lp_grouped_matmul(
    x: torch.Tensor, w: torch.Tensor, counts: list[int] | torch.Tensor, recipe: GemmRecipe
) -> torch.Tensor:
    """`lp_grouped_linear` with weights in (E, K, N) layout."""
    return lp_grouped_linear(x, w.transpose(1, 2), counts, recipe)
