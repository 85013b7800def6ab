"""Low-precision linear layers by emulation: quantise in the forward *and* both backward GEMMs.

Why emulation: the CPU has no fp8/fp4 (or even bf16) GEMM units, but training dynamics depend
only on the values the GEMMs see. Each of the three GEMMs of a linear layer quantises both
operands along its own reduction dimension with the recipe's formats and scales (so the weight
is quantised along K for the forward GEMM and along N for Dgrad, the activation along K for the
forward and along tokens for Wgrad, exactly as TE's "rowwise"/"columnwise" copies), optionally
after a random Hadamard transform, then multiplies the dequantised values in fp32. The result is
what a hardware block-scaled GEMM with fp32 accumulation would produce, up to accumulation order.

Speed (the emulation is the hot spot of CPU runs): one autograd function runs a whole grouped
GEMM as batched 3-D operations — the groups' rows are zero-padded to the longest group, which
changes no scale (zeros never raise an amax) and no tile boundary (tiles start at each group's
first row) — instead of a dozen small ops per expert. An operand whose quantised values do not
depend on the reduction direction (one scale per tensor, square 2-D weight blocks such as
128×128 or NVFP4's 16×16, bf16 rounding) is quantised once in the forward and reused by the
backward GEMM that needs it, as TE reuses its quantised copies; results are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from shared.precision.delayed import DelayedScalingState, UpdateMode, forward_update_mode
from shared.precision.hadamard import hadamard_last_dim
from shared.precision.recipe import GemmRecipe
from shared.precision.scaling import QuantSpec, fake_quantize_batched

# (X (B, M, K), W (B, N, K), recipe, delayed state or None, update mode) -> X Wᵀ (B, M, N), differentiable.
BatchedGemm = Callable[[torch.Tensor, torch.Tensor, GemmRecipe, "DelayedScalingState | None", UpdateMode], torch.Tensor]

# Pad groups to the longest one only while that costs at most this factor in padded rows;
# beyond it (very uneven routing) each group runs as its own batch of one.
_MAX_PAD_FACTOR = 2.0


def _transpose_invariant(spec: QuantSpec) -> bool:
    """True when quantising along either dimension gives the same values (square tiles, one scale)."""
    return spec.block[0] == spec.block[1]


def _q(t: torch.Tensor, spec: QuantSpec, hadamard: bool, recipe: GemmRecipe) -> torch.Tensor:
    """Quantise → dequantise a batch of operands (B, rows, reduction dim), after the RHT if asked."""
    t = t.float()
    if hadamard:
        t = hadamard_last_dim(t, recipe.hadamard_size, recipe.seed)
    return fake_quantize_batched(t, spec)[0]


class _LowPrecisionBmm(torch.autograd.Function):
    """Y_b = X_b W_bᵀ for a batch of GEMMs, X (B, M, K), W (B, N, K); quantised operands in all three GEMMs."""

    @staticmethod
    def forward(ctx, x, w, recipe: GemmRecipe, state: DelayedScalingState | None, mode: UpdateMode):
        r = recipe
        had_all = r.hadamard == "all"
        if state is not None:  # delayed per-tensor scaling: one stale scale per operand and group
            xq = state.quantize("x", x, r.x.fmt, mode)
            wq = state.quantize("w", w, r.w.fmt, mode)
        else:
            xq = _q(x, r.x, had_all, r)
            wq = _q(w, r.w, had_all, r)
        ctx.reuse_x = state is not None or (r.hadamard == "off" and _transpose_invariant(r.x))
        ctx.reuse_w = state is not None or (not had_all and _transpose_invariant(r.w))
        ctx.save_for_backward(xq if ctx.reuse_x else x, wq if ctx.reuse_w else w)
        ctx.recipe, ctx.state, ctx.dtypes = r, state, (x.dtype, w.dtype)
        return torch.bmm(xq, wq.transpose(1, 2)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x_s, w_s = ctx.saved_tensors
        r: GemmRecipe = ctx.recipe
        state: DelayedScalingState | None = ctx.state
        had_all, had_wgrad = r.hadamard == "all", r.hadamard in ("wgrad", "all")
        dx = dw = None
        dyq = None
        if state is not None:
            dyq = state.quantize("grad", dy, r.grad.fmt, "train")  # one scale for Dgrad and Wgrad
        if ctx.needs_input_grad[0]:  # Dgrad: dX = dY W, reduction over N
            if dyq is None:
                dyq = _q(dy, r.grad, had_all, r)
            if ctx.reuse_w:
                dx = torch.bmm(dyq, w_s)
            else:
                wq = _q(w_s.transpose(1, 2), r.w, had_all, r)  # (B, K, N) along N
                dx = torch.bmm(dyq, wq.transpose(1, 2))
            dx = dx.to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:  # Wgrad: dW = dYᵀ X, reduction over tokens
            if state is not None or (dyq is not None and r.hadamard == "off" and _transpose_invariant(r.grad)):
                dyq_t = dyq.transpose(1, 2)
            else:
                dyq_t = _q(dy.transpose(1, 2), r.grad, had_wgrad, r)
            xq_t = x_s.transpose(1, 2) if ctx.reuse_x else _q(x_s.transpose(1, 2), r.x, had_wgrad, r)
            dw = torch.bmm(dyq_t, xq_t.transpose(1, 2)).to(ctx.dtypes[1])
        return dx, dw, None, None, None


def lp_linear(
    x: torch.Tensor, w: torch.Tensor, recipe: GemmRecipe, state: DelayedScalingState | None = None,
    bmm: BatchedGemm | None = None,
) -> torch.Tensor:
    """x (..., K) @ w (N, K)ᵀ under `recipe`; an inactive recipe (plain bf16) is F.linear.

    `state` (one group) carries the amax history when the recipe uses delayed scaling. `bmm` is the
    batched low-precision GEMM to run (default: the emulation; `shared.precision.native` passes
    its hardware fp8 one, which quantises the same way).
    """
    if not recipe.active:
        return torch.nn.functional.linear(x, w)
    _check_state(recipe, state)
    lead = x.shape[:-1]
    x2 = x.reshape(1, -1, x.shape[-1])
    if x2.shape[1] == 0:
        return x.new_zeros(*lead, w.shape[0])
    y = (bmm or _LowPrecisionBmm.apply)(x2, w[None], recipe, state, forward_update_mode())
    return y.reshape(*lead, w.shape[0])


def lp_matmul(x: torch.Tensor, w: torch.Tensor, recipe: GemmRecipe) -> torch.Tensor:
    """x (..., K) @ w (K, N) under `recipe` (the expert-weight layout of grouped GEMMs)."""
    return lp_linear(x, w.t(), recipe)


def _check_state(recipe: GemmRecipe, state: DelayedScalingState | None) -> None:
    if recipe.delayed is not None and state is None:
        raise ValueError("this recipe uses delayed scaling: pass the GEMM's DelayedScalingState (its amax history)")


def lp_grouped_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    counts: list[int] | torch.Tensor,
    recipe: GemmRecipe,
    state: DelayedScalingState | None = None,
    bmm: BatchedGemm | None = None,
) -> torch.Tensor:
    """Grouped GEMM in `nn.Linear` layout: rows of x (A, K) sorted by expert, `counts[e]` rows for
    w[e] (N, K); -> (A, N). Rows past sum(counts) (dropped by capacity) give zeros.

    Each expert's block is its own GEMM with its own scales, as in a hardware grouped GEMM; the
    layout matches `shared.kernels.grouped_mm` so the model can swap one call for the other.
    `state` (one group per expert) carries the amax histories for delayed scaling; `bmm` as in
    `lp_linear`.
    """
    counts = [int(c) for c in (counts.tolist() if torch.is_tensor(counts) else counts)]
    n_experts, n_out = w.shape[0], w.shape[1]
    total = sum(counts)
    if total > x.shape[0] or len(counts) != n_experts:
        raise ValueError(
            f"counts {counts} must have one entry per expert ({n_experts}) and cover at most {x.shape[0]} rows"
        )
    if not recipe.active:
        outs = [torch.nn.functional.linear(c, w[e]) for e, c in enumerate(torch.split(x[:total], counts))]
        return torch.cat([*outs, x.new_zeros(x.shape[0] - total, n_out)])
    _check_state(recipe, state)
    if total == 0:
        return x.new_zeros(x.shape[0], n_out)
    mode = forward_update_mode()
    bmm = bmm or _LowPrecisionBmm.apply
    longest = max(counts)
    if n_experts * longest <= _MAX_PAD_FACTOR * total or state is not None:
        y = _padded_bmm(x[:total], w, counts, longest, recipe, state, mode, bmm)
    else:
        outs = [
            bmm(c[None], w[e : e + 1], recipe, None, mode)[0] if len(c) else c.new_zeros(0, n_out)
            for e, c in enumerate(torch.split(x[:total], counts))
        ]
        y = torch.cat(outs)
    if total < x.shape[0]:
        y = torch.cat([y, x.new_zeros(x.shape[0] - total, n_out)])
    return y


def _padded_bmm(x_AK, w_ENK, counts, longest, recipe, state, mode, bmm):
    """Scatter each group's rows into a zero-padded (E, longest, K) batch, run it, gather back."""
    n_experts, total = len(counts), x_AK.shape[0]
    if total == n_experts * longest:  # equal groups: a view, no copy
        dest = None
        x_EMK = x_AK.reshape(n_experts, longest, -1)
    else:
        counts_t = torch.tensor(counts, device=x_AK.device)
        group = torch.repeat_interleave(torch.arange(n_experts, device=x_AK.device), counts_t)
        starts = torch.cumsum(counts_t, 0) - counts_t
        dest = group * longest + torch.arange(total, device=x_AK.device) - starts[group]
        x_EMK = x_AK.new_zeros(n_experts * longest, x_AK.shape[1]).index_copy(0, dest, x_AK)
        x_EMK = x_EMK.view(n_experts, longest, -1)
    y_EMN = bmm(x_EMK, w_ENK, recipe, state, mode)
    y_flat = y_EMN.reshape(n_experts * longest, -1)
    return y_flat if dest is None else y_flat.index_select(0, dest)


def lp_grouped_matmul(
    x: torch.Tensor, w: torch.Tensor, counts: list[int] | torch.Tensor, recipe: GemmRecipe
) -> torch.Tensor:
    """`lp_grouped_linear` with weights in (E, K, N) layout."""
    return lp_grouped_linear(x, w.transpose(1, 2), counts, recipe)
