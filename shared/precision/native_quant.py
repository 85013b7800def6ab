"""fp8 operands for `torch._scaled_mm`: the emulation's tiles and scales, stored as real fp8.

The native backend must compute what the emulation computes, so quantisation is shared: the
same tiles (`scaling._tiles`), the same scales (`scaling._scales_from_amax`, or the delayed
history's scale) and the same rounding. Values divided by their tile's scale are rounded onto
the fp8 grid (round-to-nearest-even, which torch's `float8_e4m3fn` / `float8_e5m2` casts match
bit for bit; stochastic rounding through `round_to_format`), so the cast to fp8 is exact and the
hardware GEMM multiplies exactly the values the emulation dequantises. Only the accumulation
order and the bf16 output rounding differ.

`torch._scaled_mm(a, b, scale_a, scale_b)` computes (a · scale_a) @ (b · scale_b): its scales
dequantise, as ours do. It infers the scaling kind from the scale tensors' shapes and strides
(PyTorch's `ScaledBlas.cpp`, `get_joint_scaling`): one element = per tensor; (M, 1) and (1, N)
= per row; (M, K/128) with strides (1, M) = 1×128 tiles; for the second operand, blocks are
described on its transpose. `scale_layout` produces exactly those layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shared.precision.delayed import DelayedScalingState, UpdateMode
from shared.precision.formats import FloatFormat, round_to_format
from shared.precision.scaling import QuantSpec, _scales_from_amax, _tiles

FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class Fp8Operand:
    """A batch of GEMM operands (B, rows, reduction) in fp8, with dequantisation scales.

    `kind` is how the scales tile the operand: tensor (B, 1, 1), row (B, rows, 1), 1x128
    (B, rows, ⌈red/128⌉) or 128x128 (B, ⌈rows/128⌉, ⌈red/128⌉). All-zero tiles carry scale 1.
    """

    data: torch.Tensor
    scale: torch.Tensor
    kind: str

    def transposed(self) -> Fp8Operand:
        """The same values with rows and reduction swapped; only for kinds that do not depend on the
        direction (one scale per tensor, square 128×128 blocks), as TE reuses its fp8 copies."""
        if self.kind not in ("tensor", "128x128"):
            raise ValueError(f"a {self.kind} fp8 operand is not transpose-invariant; quantise the transpose instead")
        return Fp8Operand(self.data.transpose(1, 2).contiguous(), self.scale.transpose(1, 2).contiguous(), self.kind)

    def dequantize(self) -> torch.Tensor:
        """fp32 values (B, rows, reduction): what the emulation's quantise → dequantise returns."""
        b, rows, cols = self.data.shape
        br = rows if self.kind in ("tensor",) else 1 if self.kind in ("row", "1x128") else 128
        bc = cols if self.kind in ("tensor", "row") else 128
        s = self.scale.repeat_interleave(br, 1).repeat_interleave(bc, 2)[:, :rows, :cols]
        return self.data.float() * s


def spec_kind(spec: QuantSpec) -> str:
    """The `torch._scaled_mm` scaling kind of an fp8 operand spec (fp32 scales only)."""
    kinds = {(-1, -1): "tensor", (1, -1): "row", (1, 128): "1x128", (128, 128): "128x128"}
    if spec.scale_kind != "fp32" or spec.block not in kinds:
        raise ValueError(
            f"no torch._scaled_mm layout for fp8 {spec.block} tiles with {spec.scale_kind} scales "
            "(native fp8 covers per-tensor, per-row and 1×128 / 128×128 fp32 scales)"
        )
    return kinds[spec.block]


def _cast(values: torch.Tensor, fmt: FloatFormat, stochastic: bool) -> torch.Tensor:
    """Values already divided by their scale, rounded onto `fmt`'s grid and stored as fp8."""
    if stochastic:
        values = round_to_format(values, fmt, stochastic=True)
    return values.clamp(-fmt.max, fmt.max).to(FP8_DTYPES[fmt.name])


def quantize_fp8(t: torch.Tensor, spec: QuantSpec) -> Fp8Operand:
    """Current scaling: t (B, rows, reduction) cut into the spec's tiles, each scaled by amax / fmt.max."""
    kind = spec_kind(spec)
    t = t.float()
    b, rows, cols = t.shape
    tiles, br, bc = _tiles(t, spec.block)
    scales = _scales_from_amax(tiles.abs().amax(dim=(2, 4)), spec)
    safe = torch.where(scales > 0, scales, 1.0)
    q = _cast(tiles / safe[:, :, None, :, None], spec.fmt, spec.stochastic)
    q = q.reshape(b, tiles.shape[1] * br, tiles.shape[3] * bc)[:, :rows, :cols].contiguous()
    return Fp8Operand(q, safe.contiguous(), kind)


def quantize_fp8_delayed(
    state: DelayedScalingState, role: str, t: torch.Tensor, fmt: FloatFormat, mode: UpdateMode
) -> Fp8Operand:
    """Delayed per-tensor scaling: cast with the scale the amax history gives (TE convention: the
    fp8 value is t · scale, saturated), dequantised by 1 / scale; the history updates as in the emulation."""
    t = t.float()
    s = state.step_scale(role, t, fmt, mode)
    q = _cast(t * s[:, None, None], fmt, stochastic=False)
    return Fp8Operand(q, (1.0 / s).reshape(-1, 1, 1).contiguous(), "tensor")


# How one per-tensor scale is handed to `torch._scaled_mm`: a 0-dim tensor, a 1×1 tensor, or
# repeated per row (the row-wise kernel; the same products). cuBLAS builds differ in which of
# these they run (an H200 with torch 2.11 + CUDA 13 refused the 0-dim form in cublasLtMatmul while
# the row-wise kernel ran), so the native probe tries them in this order and keeps the first that works.
TENSOR_SCALE_FORMS = ("scalar", "1x1", "rows")


def scale_layout(op: Fp8Operand, index: int, second: bool, tensor_form: str = "scalar") -> torch.Tensor:
    """The scale tensor `torch._scaled_mm` expects for matrix `index` of `op` as its first operand
    (a, rows = M) or, with `second`, as its second (b = op.data[index].t(), rows = N).
    `tensor_form` (one of `TENSOR_SCALE_FORMS`) says how a per-tensor scale is passed."""
    s = op.scale[index]
    if op.kind == "tensor":
        if tensor_form == "scalar":
            return s.reshape(())
        if tensor_form == "1x1":
            return s.reshape(1, 1)
        if tensor_form != "rows":
            raise ValueError(f"tensor_form must be one of {TENSOR_SCALE_FORMS}, got {tensor_form!r}")
        rows = op.data.shape[1]
        return s.reshape(1, 1).expand(1, rows).contiguous() if second else s.reshape(1, 1).expand(rows, 1).contiguous()
    if op.kind == "row":
        return s.reshape(1, -1) if second else s.reshape(-1, 1)
    if op.kind == "1x128":  # (rows, ⌈K/128⌉): first operand wants strides (1, rows); second its transpose
        return s.t().contiguous() if second else s.t().contiguous().t()
    # 128x128, only ever the second operand (weights): b.t()'s scales are s itself, row-major
    if not second:
        raise ValueError("128×128 scale blocks are for the weight operand; activations and gradients use 1×128")
    return s.t()


def row_scales(op: Fp8Operand) -> torch.Tensor:
    """Per-row scales (B, rows) of an operand whose scales do not vary along the reduction
    (tensor or row kind): the layout of `torch._scaled_grouped_mm`'s batched (3-D × 3-D) form."""
    if op.kind == "tensor":
        return op.scale.reshape(-1, 1).expand(-1, op.data.shape[1]).contiguous()
    if op.kind == "row":
        return op.scale[:, :, 0].contiguous()
    raise ValueError(f"{op.kind} scales vary along the reduction dimension; no per-row form")
