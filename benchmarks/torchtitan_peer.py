"""torchtitan's routed experts as both CPU benchmarks run them: fp32 grouped GEMMs, no bf16 casts.

torchtitan's `GroupedExperts.forward` casts its inputs and weights to bf16 before each
`torch._grouped_mm`. These CPUs have no bf16 units, so those GEMMs (and the casts, ~7% of
torchtitan's MoE-layer time in a check) would time an emulation nobody trains with, and the
output would differ from ours by bf16 rounding. The subclass below computes the same thing —
silu(x W1ᵀ) ⊙ (x W3ᵀ), then W2ᵀ, per expert through `_grouped_mm` over per-expert offsets — in
fp32, so torchtitan is compared with ours at the dtype ours runs, and must match it as closely as
HF does. `benchmarks/moe_layer.py` and `benchmarks/train_step.py` both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def fp32_grouped_experts() -> type:
    """The `GroupedExperts` subclass (build it from its nested `Config`); imports torchtitan."""
    from torchtitan.models.common.moe import GroupedExperts

    class FP32GroupedExperts(GroupedExperts):
        @dataclass(kw_only=True, slots=True)
        class Config(GroupedExperts.Config):
            pass

        def forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
            offs = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)
            h_RF = F.silu(self._grouped_mm(A=x_RD, B_t=self.w1_EFD.transpose(-2, -1), offs=offs))
            h_RF = h_RF * self._grouped_mm(A=x_RD, B_t=self.w3_EFD.transpose(-2, -1), offs=offs)
            return self._grouped_mm(A=h_RF, B_t=self.w2_EDF.transpose(-2, -1), offs=offs)

    return FP32GroupedExperts
