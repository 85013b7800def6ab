"""Routed experts: E fine-grained SwiGLU experts stored as 3-D tensors, run by `shared.kernels`.

Shapes are in the names: `w1_EFD`/`w3_EFD` (experts, expert width, model dim) and `w2_EDF`, each
expert in `nn.Linear` (out, in) layout so an optimizer can treat every expert as its own matrix
(Muon orthogonalises the last two dims) and precision code can wrap `shared.kernels.grouped_mm`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from shared.kernels import grouped_mm, moe_experts_forward
from shared.kernels.dispatch import GroupedMM, Routing


class RoutedExperts(nn.Module):
    def __init__(self, n_experts: int, d_model: int, hidden: int, backend: str = "auto") -> None:
        super().__init__()
        self.backend = backend
        # The grouped GEMM the experts run; precision code (bf16/fp8/nvfp4) swaps in a wrapper of
        # `shared.kernels.grouped_mm` with the same signature.
        self.gmm: GroupedMM = grouped_mm
        self.w1_EFD = nn.Parameter(torch.empty(n_experts, hidden, d_model))
        self.w3_EFD = nn.Parameter(torch.empty(n_experts, hidden, d_model))
        self.w2_EDF = nn.Parameter(torch.empty(n_experts, d_model, hidden))
        for w in (self.w1_EFD, self.w3_EFD):
            nn.init.normal_(w, std=d_model**-0.5)
        nn.init.normal_(self.w2_EDF, std=hidden**-0.5)

    def forward(self, x_TD: Tensor, idx_TK: Tensor, weights_TK: Tensor, capacity: int | None = None) -> tuple[Tensor, Routing]:
        return moe_experts_forward(
            x_TD, idx_TK, weights_TK, self.w1_EFD, self.w3_EFD, self.w2_EDF,
            backend=self.backend, capacity=capacity, gmm=self.gmm,
        )
