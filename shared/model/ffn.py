"""Dense SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer"): w2(silu(w1 x) ⊙ w3 x).

Used for the first `first_k_dense` layers, for the shared experts, and for the whole FFN of the
dense twin (`model.ffn = dense`), whose width matches the MoE's active experts.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
