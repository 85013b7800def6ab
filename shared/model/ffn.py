"""Dense SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer"): w2(silu(w1 x) ⊙ w3 x).

Used for the first `first_k_dense` layers, for the shared experts, and for the whole FFN of the
dense twin (`model.ffn = dense`), whose width matches the MoE's active experts. Its linears are
`shared.kernels.cpu_gemm.Linear`: `nn.Linear`s whose fp32 CPU GEMMs each run on the library the
autotune measured fastest on the machine (MKL or oneDNN: which wins depends on the CPU,
docs/moe.md), so the shared experts keep pace with the fused routed experts and the
dense twin gets the same GEMMs as the MoE it is compared with.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from shared.kernels.cpu_gemm import Linear


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = Linear(d_model, hidden)
        self.w3 = Linear(d_model, hidden)
        self.w2 = Linear(hidden, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
