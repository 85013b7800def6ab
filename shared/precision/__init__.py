"""Expert (and dense) GEMM precision: bf16, fp8, nvfp4 — transformer-engine on GPU, emulation elsewhere.

`model.moe.precision` (a `PrecisionConfig`) picks the mode; `gemm_recipe(cfg)` turns it into
per-operand quantisation specs and `lp_linear` / `lp_matmul` / `lp_grouped_matmul` run the GEMMs
with quantised operands in forward and backward (`DelayedScalingState` holds the amax history of
delayed fp8 scaling). `experts.apply_precision` wires it into the model, on transformer-engine
(`te_backend`) or the emulation per `precision.backend`. `memory.bytes_per_param` gives the HBM cost.
"""

from shared.precision.delayed import DelayedScalingState
from shared.precision.formats import BF16, E2M1, E4M3, E5M2, FloatFormat, round_to_format
from shared.precision.matmul import lp_grouped_linear, lp_grouped_matmul, lp_linear, lp_matmul
from shared.precision.recipe import GemmRecipe, gemm_recipe
from shared.precision.scaling import QuantSpec, fake_quantize

__all__ = [
    "BF16",
    "DelayedScalingState",
    "E2M1",
    "E4M3",
    "E5M2",
    "FloatFormat",
    "GemmRecipe",
    "QuantSpec",
    "fake_quantize",
    "gemm_recipe",
    "lp_grouped_linear",
    "lp_grouped_matmul",
    "lp_linear",
    "lp_matmul",
    "round_to_format",
]
