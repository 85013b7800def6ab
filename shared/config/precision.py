"""Precision section (`model.moe.precision`): the number format of expert (and dense) GEMMs.

Why a section of its own: low-precision experts are a config switch, and everything that
decides how a GEMM is quantised (format, scaling granularity, gradient rounding, Hadamard
transform, master-weight dtype) must be visible and saved with the run. The defaults follow the
published recipes: DeepSeek-V3 fine-grained fp8 (1×128 activation tiles, 128×128 weight blocks,
e4m3 everywhere, arXiv 2412.19437 §3.3) and NVIDIA's NVFP4 pretraining recipe (16-element e2m1
blocks with e4m3 scales and an fp32 tensor scale, 16×16 2-D weight blocks, 16-point random
Hadamard transform on the Wgrad inputs, stochastic rounding of gradients, arXiv 2509.25149).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config.base import Section

GemmMode = Literal["bf16", "fp8", "nvfp4"]


class PrecisionConfig(Section):
    expert: GemmMode = Field(
        "bf16", description="Number format of the routed/shared expert GEMMs: bf16 (baseline), fp8 or nvfp4."
    )
    dense: GemmMode = Field("bf16", description="Number format of attention and dense-FFN GEMMs (kept bf16 by the recipes).")
    fp8_granularity: Literal["tensor", "row", "block", "mxfp8"] = Field(
        "block",
        description="fp8 scales: per-tensor, per-row, block (1×128 activations/grads, 128×128 weights) or mxfp8 (1×32, e8m0).",
    )
    fp8_grad_format: Literal["e4m3", "e5m2"] = Field(
        "e4m3", description="fp8 format of gradients (DeepSeek-V3: e4m3 with fine scales; TE hybrid: e5m2)."
    )
    fp8_grad_stochastic: bool = Field(False, description="Stochastic rounding of fp8 gradients (the fp8 recipes round to nearest).")
    nvfp4_grad_stochastic: bool = Field(True, description="Stochastic rounding of nvfp4 gradients (NVIDIA's NVFP4 recipe: on).")
    nvfp4_weight_2d: bool = Field(
        True, description="nvfp4 weights in 16×16 blocks so forward and backward see the same quantised weight."
    )
    hadamard: Literal["off", "wgrad", "all"] = Field(
        "wgrad", description="Random Hadamard transform on nvfp4 GEMM inputs: off, Wgrad GEMM only (recipe), or all GEMMs."
    )
    hadamard_size: Literal[16, 32, 64, 128] = Field(16, description="Size of the blockwise random Hadamard transform.")
    emulate_bf16: bool = Field(
        False, description="In emulation, round bf16-mode GEMM operands to bf16 (else the CPU computes them in fp32)."
    )
    master_weights: Literal["fp32", "bf16"] = Field(
        "fp32", description="Master weight dtype; bf16 applies stochastic rounding to every optimizer update."
    )
    seed: int = Field(0, ge=0, description="Seed of the random Hadamard signs (stochastic rounding uses the torch RNG).")
