"""Row-wise fp8 quantisation as one function each, for the ragged grouped fp8 GEMM.

Why: the first native path quantised every operand through the generic tile code (`_tiles`,
`_scales_from_amax`, a `where`, a divide, a clamp, a cast: about nine eager kernels with fp32
intermediates), and that, not the GEMM, made fp8 experts slower than bf16 on Hopper. Row-wise
scales need only amax along one dimension, a divide and a saturating cast; written as one plain
function with no data-dependent control flow, `torch.compile` fuses each into one kernel (a
reduction plus a pointwise epilogue), which is what these functions become on CUDA
(`compiled`). The values are the emulation's: scale = amax / fmt.max (1 for an all-zero row),
values divided by the scale and rounded to nearest-even by the fp8 cast, so
`native_quant.quantize_fp8` and `scaling.fake_quantize_batched` with (1, -1) tiles give the same
bits (tested).

Two layouts cover a grouped GEMM's three products:

- `quantize_rows`: one scale per row of the last dimension: activations and gradients along the
  feature dimension (forward, Dgrad), and weights along either of their dimensions;
- `quantize_group_columns`: for the weight gradient, whose reduction runs over each expert's own
  tokens, one scale per (expert, column) taken over that expert's rows of a ragged (rows, C)
  operand, found by a scatter-amax on the row → expert map (no host sync, any group sizes).
"""

from __future__ import annotations

import functools

import torch

from shared.precision.formats import FloatFormat, round_to_format
from shared.precision.native_quant import FP8_DTYPES


def quantize_rows(t: torch.Tensor, fmt: FloatFormat, stochastic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """t (..., C) -> (fp8 values (..., C), fp32 dequantisation scales (...,)), one scale per row."""
    t = t.float()
    scale = t.abs().amax(dim=-1) / fmt.max
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return _cast(t / scale[..., None], fmt, stochastic), scale


def quantize_group_columns(
    t: torch.Tensor, group_of_row: torch.Tensor, n_groups: int, fmt: FloatFormat, stochastic: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """t (R, C) whose row r belongs to group `group_of_row[r]` (0..n_groups; the value n_groups
    marks rows of no group) -> (fp8 values (R, C), scales (n_groups, C)): one scale per group and
    column, over that group's rows only."""
    t = t.float()
    index = group_of_row[:, None].expand(-1, t.shape[1])
    amax = t.new_zeros(n_groups + 1, t.shape[1]).scatter_reduce(0, index, t.abs(), "amax", include_self=True)
    scale = amax / fmt.max
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = _cast(t / scale.gather(0, index), fmt, stochastic)
    return q, scale[:n_groups]


def _cast(values: torch.Tensor, fmt: FloatFormat, stochastic: bool) -> torch.Tensor:
    if stochastic:  # our own rounding code, as the emulation's; the cast is then exact
        values = round_to_format(values, fmt, stochastic=True)
    return values.clamp(-fmt.max, fmt.max).to(FP8_DTYPES[fmt.name])


@functools.cache
def compiled(name: str):
    """`quantize_rows` or `quantize_group_columns` under `torch.compile` (built on first use, so
    importing this module does not import the compiler); used for CUDA tensors."""
    fn = {"rows": quantize_rows, "group_columns": quantize_group_columns}[name]
    return torch.compile(fn, dynamic=True)


def quantizer(name: str, device: torch.device):
    """The quantiser to run on `device`: compiled (fused) on CUDA, eager elsewhere."""
    if device.type == "cuda":
        return compiled(name)
    return {"rows": quantize_rows, "group_columns": quantize_group_columns}[name]
