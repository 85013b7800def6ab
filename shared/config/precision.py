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

from pydantic import Field, model_validator

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
    backend: Literal["auto", "emulate", "te", "native", "torchao"] = Field(
        "auto",
        description="Where fp8/nvfp4 GEMMs run: te (transformer-engine on CUDA), native (PyTorch's torch._scaled_mm fp8 "
        "GEMMs on sm89+/Hopper), torchao (torchao's fp8 row-wise MoE grouped GEMM on sm90; fp8_granularity=row only), "
        "emulate (quantise→dequantise, any device), auto (te where it can run the recipe, else native where the GPU "
        "can, else emulate; the choice is logged; never torchao).",
    )
    fp8_scaling: Literal["current", "delayed"] = Field(
        "current",
        description="fp8 per-tensor scale from this step's amax (current) or from an amax history of earlier steps "
        "(delayed, TE DelayedScaling); delayed needs fp8_granularity=tensor.",
    )
    amax_history_len: int = Field(
        1024, ge=1, le=1_000_000, description="Delayed scaling: amax history length per GEMM operand (TE default 1024)."
    )
    amax_compute_algo: Literal["max", "most_recent"] = Field(
        "max", description="Delayed scaling: amax from the history's max (TE default) or its most recent entry."
    )
    fp8_margin: int = Field(0, ge=0, le=16, description="Delayed scaling: scale = fp8_max / amax / 2^margin (TE margin).")

    @model_validator(mode="after")
    def _check_recipe(self) -> PrecisionConfig:
        if self.fp8_scaling == "delayed" and self.fp8_granularity != "tensor":
            raise ValueError(
                f"fp8_scaling=delayed keeps one amax history per tensor, so it needs fp8_granularity=tensor "
                f"(got {self.fp8_granularity}); use fp8_scaling=current for row/block/mxfp8 scales"
            )
        if self.backend in ("te", "native", "torchao"):
            check = {"te": self.te_unsupported_reason, "native": self.native_unsupported_reason,
                     "torchao": self.torchao_unsupported_reason}[self.backend]
            for mode in sorted({self.expert, self.dense} - {"bf16"}):
                reason = check(mode)
                if reason:
                    raise ValueError(f"backend={self.backend}: {reason}; use backend=emulate (or auto) for this recipe")
        return self

    def native_unsupported_reason(self, mode: str) -> str | None:
        """Why `mode` under this config has no PyTorch-native fp8 GEMM (None when it has one).

        `torch._scaled_mm` runs fp8 with per-tensor, per-row and (Hopper) 1×128 / 128×128 fp32
        scales, so tensor, delayed, row and block recipes map onto it; MXFP8's e8m0 1×32 blocks and
        NVFP4 need Blackwell's block-scaled GEMMs, which moelab reaches through transformer-engine:
        off Blackwell (and without TE) they stay emulated.
        """
        if mode == "nvfp4":
            return "nvfp4 has no native path (Blackwell's fp4 GEMMs run through backend=te); it stays emulated"
        if mode == "fp8" and self.fp8_granularity == "mxfp8":
            return "fp8_granularity=mxfp8 needs Blackwell's block-scaled GEMMs (backend=te); native covers tensor, row, block"
        return None

    def torchao_unsupported_reason(self, mode: str) -> str | None:
        """Why `mode` under this config has no torchao MoE fp8 GEMM (None when it has one).

        torchao's `_to_fp8_rowwise_then_scaled_grouped_mm` (0.18.0) is fp8 e4m3 with per-row
        current scales in all three GEMMs, rounded to nearest: our `fp8_granularity: row` with
        e4m3 gradients. Its MXFP8 / NVFP4 paths need Blackwell and are not wired here.
        """
        if mode != "fp8":
            return f"{mode} has no torchao path here (torchao's fp8 row-wise grouped GEMM is wired; nvfp4 stays emulated)"
        problems = [
            f"fp8_granularity={self.fp8_granularity} (torchao's is row)" if self.fp8_granularity != "row" else "",
            "fp8_grad_format=e5m2 (torchao's gradients are e4m3)" if self.fp8_grad_format != "e4m3" else "",
            "fp8_grad_stochastic=true (torchao rounds to nearest)" if self.fp8_grad_stochastic else "",
            "fp8_scaling=delayed (torchao scales each tensor from its own amax)" if self.fp8_scaling != "current" else "",
        ]
        problems = [p for p in problems if p]
        return "torchao's fp8 MoE GEMM has no recipe for " + ", ".join(problems) if problems else None

    def te_unsupported_reason(self, mode: str) -> str | None:
        """Why `mode` under this config has no transformer-engine recipe (None when it has one).

        TE's recipes (checked against TE 2.19's `transformer_engine.common.recipe`): per-tensor
        current/delayed scaling, 1×128 / 128×128 blocks, MXFP8 1×32, NVFP4 with a 16-point RHT on
        the Wgrad inputs. Per-row fp8 scales, stochastic rounding of fp8 gradients and an RHT on
        every nvfp4 GEMM (or of another size) exist only in the emulation.
        """
        if mode == "fp8":
            if self.fp8_granularity == "row":
                return "fp8_granularity=row has no transformer-engine recipe"
            if self.fp8_grad_stochastic:
                return "fp8_grad_stochastic=true has no transformer-engine recipe (TE's fp8 casts round to nearest)"
        if mode == "nvfp4":
            if self.hadamard == "all":
                return "hadamard=all has no transformer-engine recipe (TE applies its RHT to the Wgrad inputs only)"
            if self.hadamard_size != 16:
                return f"hadamard_size={self.hadamard_size} has no transformer-engine recipe (TE's RHT is 16-point)"
        return None
