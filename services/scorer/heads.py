"""Probe and Judge heads (design: ../shared/DESIGN.md, "Quality rubric").

Probe: masked mean-pool of layer-L_probe hidden states → Linear(width → n_dims). Cheap enough to
run on every document; its job is to drop the clearly bad ones before the expensive layers.
Judge: the layer-L_judge sequence → Linear(width → 512) → a 2-layer transformer encoder with full
attention over the sequence (padding masked) → masked mean-pool → Linear(512 → n_dims).

Both predict the rubric dimensions scaled to [0, 1] (score / max) and are trained with mean
squared error: the labels are ordinal integers on a small scale, regression keeps their order and
distance, and a continuous output is what the keep/drop thresholds are calibrated on (the
FineWeb-Edu classifier makes the same choice).
"""

from __future__ import annotations

import torch
from torch import nn


def masked_mean(x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    m = mask_BT.to(x_BTD.dtype).unsqueeze(-1)
    return (x_BTD * m).sum(1) / m.sum(1).clamp_min(1.0)


class Probe(nn.Module):
    def __init__(self, width: int, n_dims: int) -> None:
        super().__init__()
        self.out = nn.Linear(width, n_dims)

    def forward_pooled(self, pooled_BD: torch.Tensor) -> torch.Tensor:
        return self.out(pooled_BD)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
        return self.out(masked_mean(x_BTD, mask_BT))


class Judge(nn.Module):
    def __init__(self, width: int, n_dims: int, dim: int = 512, layers: int = 2, heads: int = 8,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.proj = nn.Linear(width, dim)
        block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, n_dims)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.proj(x_BTD), src_key_padding_mask=~mask_BT.bool())
        return self.out(self.norm(masked_mean(h, mask_BT)))
