"""From `PrecisionConfig` to a `GemmRecipe`: how each operand of each GEMM is quantised.

A linear layer runs three GEMMs (forward Y = X Wᵀ, Dgrad dX = dY W, Wgrad dW = dYᵀ X); every
operand is quantised along that GEMM's reduction dimension, as hardware block-scaled GEMMs
require. The recipes:

| mode / granularity | activations X | weights W | gradients dY |
|---|---|---|---|
| fp8 tensor (TE current scaling) | e4m3, 1 scale | e4m3, 1 scale | e4m3/e5m2, 1 scale |
| fp8 tensor, `fp8_scaling: delayed` (TE DelayedScaling) | e4m3, scale from amax history | same | same |
| fp8 row | e4m3 per row | e4m3 per row | per row |
| fp8 block (DeepSeek-V3 §3.3) | e4m3 1×128 | e4m3 128×128 | 1×128 |
| fp8 mxfp8 (OCP MX) | e4m3 1×32, e8m0 | e4m3 1×32, e8m0 | 1×32, e8m0 |
| nvfp4 (arXiv 2509.25149) | e2m1 1×16, e4m3+fp32 | e2m1 16×16 (or 1×16) | e2m1 1×16, stochastic |
| bf16 | bf16 rounding if `emulate_bf16`, else untouched | same | same |
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config.precision import PrecisionConfig
from shared.precision.delayed import DelayedParams
from shared.precision.formats import BF16, E2M1, E4M3, E5M2
from shared.precision.scaling import QuantSpec


@dataclass(frozen=True)
class GemmRecipe:
    """Quantisation of the three operand roles plus the Hadamard placement (None spec = leave as is).

    `delayed` set means the per-tensor fp8 scales come from an amax history
    (`shared.precision.delayed`) instead of each tensor's own amax.
    """

    mode: str
    x: QuantSpec | None
    w: QuantSpec | None
    grad: QuantSpec | None
    hadamard: str = "off"
    hadamard_size: int = 16
    seed: int = 0
    delayed: DelayedParams | None = None

    @property
    def active(self) -> bool:
        return self.x is not None


def gemm_recipe(cfg: PrecisionConfig, mode: str | None = None) -> GemmRecipe:
    """The recipe for `mode` (default: the expert mode) under `cfg`'s granularity and rounding knobs."""
    mode = mode or cfg.expert
    if mode == "bf16":
        if not cfg.emulate_bf16:
            return GemmRecipe("bf16", None, None, None)
        spec = QuantSpec(BF16, (-1, -1), "none")
        return GemmRecipe("bf16", spec, spec, spec)
    if mode == "fp8":
        grad_fmt = E5M2 if cfg.fp8_grad_format == "e5m2" else E4M3
        sr = cfg.fp8_grad_stochastic
        gran = cfg.fp8_granularity
        if gran == "tensor":
            act, wgt, kind = (-1, -1), (-1, -1), "fp32"
        elif gran == "row":
            act, wgt, kind = (1, -1), (1, -1), "fp32"
        elif gran == "block":
            act, wgt, kind = (1, 128), (128, 128), "fp32"
        else:  # mxfp8
            act, wgt, kind = (1, 32), (1, 32), "e8m0"
        delayed = None
        if cfg.fp8_scaling == "delayed":  # config validation guarantees per-tensor granularity
            delayed = DelayedParams(cfg.amax_history_len, cfg.amax_compute_algo, cfg.fp8_margin)
        return GemmRecipe(
            "fp8",
            QuantSpec(E4M3, act, kind),
            QuantSpec(E4M3, wgt, kind),
            QuantSpec(grad_fmt, act, kind, sr),
            delayed=delayed,
        )
    if mode == "nvfp4":
        wblock = (16, 16) if cfg.nvfp4_weight_2d else (1, 16)
        return GemmRecipe(
            "nvfp4",
            QuantSpec(E2M1, (1, 16), "nvfp4"),
            QuantSpec(E2M1, wblock, "nvfp4"),
            QuantSpec(E2M1, (1, 16), "nvfp4", cfg.nvfp4_grad_stochastic),
            hadamard=cfg.hadamard,
            hadamard_size=cfg.hadamard_size,
            seed=cfg.seed,
        )
    raise ValueError(f"unknown precision mode {mode!r}; use bf16, fp8 or nvfp4")
