"""Naive per-token MoE reference: each token, each chosen expert, one SwiGLU — the ground truth
every dispatch backend is tested against (slow; tests only)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def naive_moe_experts(
    x_TD: Tensor, idx_TK: Tensor, weights_TK: Tensor, w1_EFD: Tensor, w3_EFD: Tensor, w2_EDF: Tensor
) -> Tensor:
    """out[t] = Σ_k weights[t, k] · SwiGLU_{idx[t, k]}(x[t]), computed token by token."""
    rows = []
    for t in range(x_TD.shape[0]):
        acc = torch.zeros_like(x_TD[t])
        for k in range(idx_TK.shape[1]):
            e = int(idx_TK[t, k])
            h = F.silu(w1_EFD[e] @ x_TD[t]) * (w3_EFD[e] @ x_TD[t])
            acc = acc + weights_TK[t, k] * (w2_EDF[e] @ h)
        rows.append(acc)
    return torch.stack(rows)
