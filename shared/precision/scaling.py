"""Scaled quantise → dequantise of a 2-D operand (or a batch of them) with per-tensor, per-row or block scales.

One routine covers every recipe: the operand is cut into `(block_rows, block_cols)` tiles, each
tile gets a scale from its absolute maximum, values are divided by the scale, rounded onto the
element format's grid and multiplied back. The scale kinds are:

- `none`: scale 1 (plain bf16 rounding).
- `fp32`: scale = amax / fmt.max (TE current scaling, DeepSeek-V3's 1×128 / 128×128 tiles).
- `e8m0`: a power of two, 2^ceil(log2(amax / fmt.max)) (OCP MX v1.0 with 32-element blocks;
  rounding the exponent up means no element saturates).
- `nvfp4`: two levels (NVIDIA NVFP4): an fp32 tensor scale s_t = amax_tensor / (6 · 448) and per
  16-element block a scale amax_block / 6, divided by s_t and stored in e4m3; the element scale
  is e4m3(s_b / s_t) · s_t.

Callers lay the operand out with the GEMM's reduction dimension last, so a `(1, 128)` tile is
"128 consecutive elements along K", as the hardware GEMMs require.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from shared.precision.formats import E2M1, E4M3, FloatFormat, round_to_format

ScaleKind = Literal["none", "fp32", "e8m0", "nvfp4"]


@dataclass(frozen=True)
class QuantSpec:
    """How one GEMM operand is quantised: element format, tile shape (-1 = whole dim), scale kind."""

    fmt: FloatFormat
    block: tuple[int, int] = (-1, -1)
    scale_kind: ScaleKind = "fp32"
    stochastic: bool = False


def _tiles(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, int, int]:
    """(B, rows, cols) -> (B, row_tiles, br, col_tiles, bc), zero-padded to whole tiles."""
    _, rows, cols = x.shape
    br = rows if block[0] == -1 else min(block[0], rows)
    bc = cols if block[1] == -1 else min(block[1], cols)
    pr, pc = (-rows) % br, (-cols) % bc
    if pr or pc:
        x = torch.nn.functional.pad(x, (0, pc, 0, pr))
    tiles = x.reshape(x.shape[0], x.shape[1] // br, br, x.shape[2] // bc, bc)
    return tiles, br, bc


def _scales_from_amax(amax: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Tile scales from tile amaxes (B, row_tiles, col_tiles); 0 marks an all-zero tile."""
    if spec.scale_kind == "none":
        return torch.ones_like(amax)
    if spec.scale_kind == "fp32":
        return amax / spec.fmt.max
    if spec.scale_kind == "e8m0":
        raw = amax / spec.fmt.max
        return torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(raw.clamp_min(2.0**-127)))), 0.0)
    if spec.scale_kind == "nvfp4":
        tensor_scale = amax.amax(dim=(1, 2), keepdim=True) / (E2M1.max * E4M3.max)  # one per matrix
        safe = torch.where(tensor_scale > 0, tensor_scale, 1.0)
        stored = round_to_format(amax / E2M1.max / safe, E4M3)
        return torch.where(tensor_scale > 0, stored * tensor_scale, 0.0)
    raise ValueError(f"unknown scale kind {spec.scale_kind!r}; use none, fp32, e8m0 or nvfp4")


def fake_quantize_batched(
    x: torch.Tensor, spec: QuantSpec, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`fake_quantize` of a batch of independent operands (B, rows, cols): every matrix gets its own
    tiles and scales (its own tensor scale for per-tensor and nvfp4), as each GEMM of a grouped GEMM.

    Returns (fp32 values on the scaled grid, scales (B, row_tiles, col_tiles)). Zero rows or columns
    (the padding of a grouped GEMM's shorter groups) never change a tile's scale.
    """
    x = x.float()
    if spec.scale_kind == "none" and spec.block == (-1, -1):  # plain rounding (bf16): no scale to compute
        q = round_to_format(x, spec.fmt, stochastic=spec.stochastic, generator=generator)
        return q, torch.ones(x.shape[0], 1, 1, device=x.device)
    b, rows, cols = x.shape
    tiles, br, bc = _tiles(x, spec.block)
    scales = _scales_from_amax(tiles.abs().amax(dim=(2, 4)), spec)
    s = scales[:, :, None, :, None]
    safe = torch.where(s > 0, s, 1.0)
    q = round_to_format(tiles / safe, spec.fmt, stochastic=spec.stochastic, generator=generator) * safe
    if spec.scale_kind in ("nvfp4", "e8m0"):  # a block whose scale underflowed to 0 dequantises to 0
        q = q * (s > 0).to(q.dtype)  # (a multiply: torch.where is ~10× slower on CPU)
    q = q.reshape(b, tiles.shape[1] * br, tiles.shape[3] * bc)
    if q.shape[1] != rows or q.shape[2] != cols:
        q = q[:, :rows, :cols]
    return q, scales


def fake_quantize(
    x: torch.Tensor, spec: QuantSpec, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise → dequantise a 2-D tensor; returns (fp32 values on the scaled grid, tile scales).

    All-zero tiles (and tiles whose nvfp4 scale underflows e4m3) dequantise to zero.
    """
    if x.dim() != 2:
        raise ValueError(f"fake_quantize takes a 2-D operand (reduction dim last), got shape {tuple(x.shape)}")
    q, scales = fake_quantize_batched(x[None], spec, generator)
    if spec.scale_kind == "none" and spec.block == (-1, -1):
        return q[0], torch.ones(1, 1, device=x.device)
    return q[0], scales[0]


def expand_scales(scales: torch.Tensor, shape: tuple[int, int], block: tuple[int, int]) -> torch.Tensor:
    """The tile scale of every element of a `shape` tensor (for error bounds and reports)."""
    rows, cols = shape
    br = rows if block[0] == -1 else min(block[0], rows)
    bc = cols if block[1] == -1 else min(block[1], cols)
    full = scales.repeat_interleave(br, 0).repeat_interleave(bc, 1)
    return full[:rows, :cols]
