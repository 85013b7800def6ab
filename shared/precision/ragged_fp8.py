"""The fp8 expert grouped GEMM with row-wise scales on ragged, 16-aligned groups: three kernel calls.

A grouped linear layer y = x wₑᵀ over experts' row blocks runs, in fp8 with the per-row recipe
(`fp8_granularity: row`), as:

- forward  Y = X Wᵀ: X per row along K (`quantize_rows`), W per (expert, output row) along K:
  one `torch._scaled_grouped_mm` 2-D × 3-D call over the aligned groups;
- Dgrad   dX = dY W: dY per row along N, W per (expert, input column) along N: one 2-D × 3-D call;
- Wgrad   dW = dYᵀ X: both along each expert's tokens, one scale per (expert, column)
  (`quantize_group_columns`): one 2-D × 2-D call whose offsets split the reduction.

These are exactly the emulation's row-recipe quantisations (`shared.precision.matmul`: every
operand along its own GEMM's reduction dimension, each expert its own scales), so the fp8
values equal the emulation's dequantised ones bit for bit and the products differ only in
accumulation order (and the bf16 output on CUDA). The two weight layouts come from a
`WeightQuantCache`: computed once per optimizer step, shared by every micro-batch's forward and
backward. The activation is quantised once per layout, the gradient once per layout, with fused
quantisers on CUDA (`fused_quant`). Rows dropped by capacity (past sum(counts)) give zero
outputs and zero input gradients. Off CUDA the kernel is its fp32 reference
(`ragged.reference_scaled_grouped_mm`), which is how the CPU tests run this same code.
"""

from __future__ import annotations

import torch

from shared.precision.fused_quant import quantizer
from shared.precision.ragged import AlignedLayout, aligned_layout, scaled_grouped_mm
from shared.precision.recipe import GemmRecipe
from shared.precision.weight_cache import WeightQuantCache


def ragged_supports(recipe: GemmRecipe, n_out: int, n_in: int) -> str | None:
    """Why this recipe / shape cannot run on the ragged path (None when it can)."""
    if recipe.mode != "fp8" or recipe.delayed is not None or recipe.hadamard != "off":
        return "the ragged path runs fp8 with current scaling and no Hadamard transform"
    blocks = {recipe.x.block, recipe.w.block, recipe.grad.block}
    if blocks != {(1, -1)} or {s.scale_kind for s in (recipe.x, recipe.w, recipe.grad)} != {"fp32"}:
        return "the ragged path runs per-row fp32 scales (fp8_granularity=row)"
    if recipe.x.fmt.name != "e4m3" or recipe.w.fmt.name != "e4m3" or recipe.grad.fmt.name != "e4m3":
        return "torch._scaled_grouped_mm multiplies e4m3 operands only (fp8_grad_format=e4m3)"
    if n_out % 16 or n_in % 16:
        return f"torch._scaled_grouped_mm needs both weight dimensions divisible by 16, got {n_out}x{n_in}"
    return None


def _layout_tensors(layout: AlignedLayout) -> tuple[torch.Tensor, ...]:
    """The layout's tensors, saved for the backward through autograd (so memory accounting sees them)."""
    return layout.dest, layout.offs, layout.group_of_row, layout.valid, layout.empty


class RaggedFp8GroupedLinear(torch.autograd.Function):
    """y (A, N) = grouped x (A, K) · w (E, N, K)ᵀ, fp8 row-wise in all three GEMMs (see module doc)."""

    @staticmethod
    def forward(ctx, x, w, counts, recipe: GemmRecipe, cache: WeightQuantCache, site: str):
        layout = aligned_layout(counts, x.shape[0])
        rows, cols = quantizer("rows", x.device), quantizer("group_columns", x.device)
        xq, xs = rows(layout.scatter(x), recipe.x.fmt, recipe.x.stochastic)
        wq, ws = cache.get(f"{site}.fwd", w, lambda t: rows(t, recipe.w.fmt))  # (E, N, K), (E, N)
        y = scaled_grouped_mm(xq, wq.transpose(1, 2), xs, ws, layout.offs)
        ctx.recipe, ctx.n_groups, ctx.padded_rows = recipe, w.shape[0], layout.padded_rows
        ctx.dtypes = (x.dtype, w.dtype)
        # Dgrad's layout of W (along N) comes from the cache now, so the backward keeps no fp32
        # weight alive; the Wgrad layout of x (per expert and column, along tokens) only if W trains
        wtq = wts = x_cols = x_col_scales = None
        if ctx.needs_input_grad[0]:  # W along N: rows of wᵀ (E, K, N), the kernel's (E, N, K) column-major operand
            wtq, wts = cache.get(f"{site}.dgrad", w, lambda t: rows(t.transpose(1, 2).contiguous(), recipe.w.fmt))
        if ctx.needs_input_grad[1]:
            x_cols, x_col_scales = cols(layout.scatter(x), layout.group_of_row, w.shape[0], recipe.x.fmt)
        ctx.save_for_backward(wtq, wts, x_cols, x_col_scales, *_layout_tensors(layout))
        return layout.gather(y).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        wtq, wts, x_cols, x_col_scales, *layout_tensors = ctx.saved_tensors
        r, layout = ctx.recipe, AlignedLayout(*layout_tensors, ctx.padded_rows)
        rows, cols = quantizer("rows", dy.device), quantizer("group_columns", dy.device)
        dy_pad = layout.scatter(dy.contiguous())
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dyq, dys = rows(dy_pad, r.grad.fmt, r.grad.stochastic)
            dx = layout.gather(scaled_grouped_mm(dyq, wtq.transpose(1, 2), dys, wts, layout.offs)).to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            dyc, dycs = cols(dy_pad, layout.group_of_row, ctx.n_groups, r.grad.fmt, r.grad.stochastic)
            a = dyc.t().contiguous()  # (N, rows) row-major
            b = x_cols.t().contiguous().t()  # (rows, K) column-major
            dw = scaled_grouped_mm(a, b, dycs.reshape(-1), x_col_scales.reshape(-1), layout.offs)
            dw = dw.masked_fill(layout.empty[:, None, None], 0).to(ctx.dtypes[1])  # empty experts: unwritten blocks
        return dx, dw, None, None, None, None


def ragged_fp8_grouped_linear(
    x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor | list[int], recipe: GemmRecipe,
    cache: WeightQuantCache | None = None, site: str = "w",
) -> torch.Tensor:
    """Grouped GEMM in `nn.Linear` layout (as `lp_grouped_linear`) on the ragged fp8 path.

    `cache` keeps the weight's fp8 layouts across calls (a fresh one per call if None); `site`
    names the weight within it (one entry per GEMM site, e.g. the experts' gate/up and down).
    """
    reason = ragged_supports(recipe, w.shape[1], w.shape[2])
    if reason:
        raise ValueError(reason)
    counts_t = counts if torch.is_tensor(counts) else torch.tensor(counts, device=x.device)
    if counts_t.shape != (w.shape[0],):
        raise ValueError(f"counts must have one entry per expert ({w.shape[0]}), got shape {tuple(counts_t.shape)}")
    return RaggedFp8GroupedLinear.apply(x, w, counts_t.to(x.device), recipe, cache or WeightQuantCache(), site)
