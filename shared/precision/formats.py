"""Number formats and element rounding (nearest-even and stochastic) onto their grids.

Why our own rounding: torch casts to `float8_e4m3fn`, `float8_e5m2` and `bfloat16` round to
nearest, which we use as-is; but stochastic rounding and the 4-bit `e2m1` grid (torch's
`float4_e2m1fn_x2` is storage only) need the grid explicitly. A finite binary float with `m`
mantissa bits and smallest normal exponent `emin` has spacing `2^(max(e, emin) - m)` around
`|x| ∈ [2^e, 2^(e+1))`; rounding on that grid in fp32 is exact because the spacing is a power of two.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FloatFormat:
    """A small binary float: `mantissa_bits`, smallest normal exponent `emin`, largest finite `max`."""

    name: str
    mantissa_bits: int
    emin: int
    max: float
    torch_dtype: torch.dtype | None = None

    @property
    def half_ulp_rel(self) -> float:
        """Worst relative error of round-to-nearest for normal numbers: 2^-(m+1)."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def subnormal_step(self) -> float:
        """Spacing of the grid below the smallest normal: 2^(emin - m)."""
        return 2.0 ** (self.emin - self.mantissa_bits)


E4M3 = FloatFormat("e4m3", 3, -6, 448.0, torch.float8_e4m3fn)
E5M2 = FloatFormat("e5m2", 2, -14, 57344.0, torch.float8_e5m2)
E2M1 = FloatFormat("e2m1", 1, 0, 6.0, None)
BF16 = FloatFormat("bf16", 7, -126, float(torch.finfo(torch.bfloat16).max), torch.bfloat16)
FORMATS = {f.name: f for f in (E4M3, E5M2, E2M1, BF16)}


def _grid_step(a: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Grid spacing at each |x| (a ≥ 0): 2^(max(floor(log2 a), emin) - m).

    2^floor(log2 a) is a's fp32 exponent field with the mantissa cleared — bit operations instead
    of log2/exp2, which dominate the emulation's time on CPU.
    """
    binade = (a.clamp_min(2.0**fmt.emin).view(torch.int32) & 0x7F800000).view(torch.float32)
    return binade * 2.0**-fmt.mantissa_bits


def round_to_format(
    x: torch.Tensor, fmt: FloatFormat, stochastic: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round fp32 `x` onto `fmt`'s grid, saturating at ±max; returns fp32 values on the grid.

    Nearest rounding is round-half-to-even on the grid — bit-identical to torch's
    `float8_e4m3fn` / `float8_e5m2` casts of the clamped value (a test checks it), computed on the
    grid because CPU torch converts fp8 back to fp32 slowly; bf16 uses torch's cast. Stochastic
    rounding rounds up with probability equal to the distance to the lower grid point divided by
    the spacing, so E[round(x)] = x for every x inside the range (Gupta et al. 2015).
    """
    x = x.float()
    if not stochastic and fmt.torch_dtype is torch.bfloat16:
        return x.clamp(-fmt.max, fmt.max).to(fmt.torch_dtype).float()
    a = x.abs().clamp_max(fmt.max)  # saturate first: max is on the grid
    step = _grid_step(a, fmt)
    scaled = a / step  # exact: step is a power of two
    if stochastic:
        low = torch.floor(scaled)
        noise = torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)
        mag = (low + (noise < scaled - low).float()) * step
    else:
        mag = torch.round(scaled) * step  # torch.round is round-half-to-even
    return torch.copysign(mag.clamp_max(fmt.max), x)
