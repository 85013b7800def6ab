"""Probe and Judge heads (design: ../shared/DESIGN.md, "Quality rubric").

Probe: masked mean-pool of layer-L_probe hidden states → Linear(width → n_dims). Cheap enough to
run on every document; its job is to drop the clearly bad ones before the expensive layers.

Judge: the layer-L_judge sequence → Linear(width → 512) → a 2-layer transformer encoder with full
attention over the sequence (padding masked) → masked mean-pool → LayerNorm → Linear(512 → n_dims),
built as a residual over a Probe:

    judge(x) = Linear(mean(h_probe)) + out(encoder(proj(h_judge) + proj_probe(h_probe)))

- Skip path: a linear head on the mean-pooled layer-L_probe states (the Probe's own input).
- Encoder path: its token inputs are the layer-L_judge states plus a projection of the
  layer-L_probe states at the same positions, and its output layer `out` is zero-initialised
  (ReZero/ControlNet-style), so the Judge starts as exactly a linear probe and the encoder learns
  a correction to it.
The cascade already holds the layer-L_probe states of every document that reaches the Judge, so
both extras cost one (width × dim) projection per token and no backbone compute.

Why, measured (docs/scorer.md, docs/LOG.md 2026-11-30, issue #9; MiniLM, heuristic stand-in oracle, held-out
Spearman, mean over 5 document samplings): the plain Judge on layer 6 alone reached 0.40 vs the
Probe's 0.65 with 130 training labels per rubric (0.58 vs 0.65 with 195). Ridge probes show why:
how linearly the labels read from mean-pooled states falls with depth (general rubric 0.83 at the
embeddings, 0.75 at layer 5, 0.46 at layer 6; MiniLM's last layer is tuned for sentence
similarity), so a skip on the Judge's own layer starts below the Probe (0.45-0.49 measured). With
the layer-L_probe skip and token inputs and the zero-initialised output the Judge reaches 0.73
(0.78 with 195 labels) and beats the Probe on 9 of 10 (10 of 10) rubric × sampling pairs. With a
randomly initialised `out` it reached 0.61: the encoder's random initial output swamps the skip
and early stopping fires before either recovers. On this backbone and oracle the layer-L_judge
sequence itself adds nothing measurable (dropping it: 0.764 vs 0.761); with a decoder backbone and
a real oracle the later layer is the point of the Judge, and the encoder weighs the two inputs.

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


# Bump when a head's architecture changes: the pipeline's distill stage keys on it, so an existing
# run directory retrains its heads instead of loading weights of the old design.
HEADS_VERSION = 2


class Probe(nn.Module):
    def __init__(self, width: int, n_dims: int) -> None:
        super().__init__()
        self.out = nn.Linear(width, n_dims)

    def forward_pooled(self, pooled_BD: torch.Tensor) -> torch.Tensor:
        return self.out(pooled_BD)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
        return self.out(masked_mean(x_BTD, mask_BT))


class Judge(nn.Module):
    """Transformer head on the layer-L_judge sequence, residual over a linear probe (module docstring)."""

    SKIP_PREFIX = "skip."  # parameters trained at the Probe's learning rate

    def __init__(self, width: int, n_dims: int, dim: int = 512, layers: int = 2, heads: int = 8,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.skip = nn.Linear(width, n_dims)
        self.proj = nn.Linear(width, dim)
        self.proj_probe = nn.Linear(width, dim, bias=False)
        block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, n_dims)
        nn.init.zeros_(self.out.weight)  # start as the skip (a linear probe); the encoder learns a correction
        nn.init.zeros_(self.out.bias)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor, probe_BTD: torch.Tensor) -> torch.Tensor:
        """x_BTD: layer-L_judge states; probe_BTD: layer-L_probe states of the same tokens; mask_BT: 1 = token."""
        h_BTE = self.encoder(self.proj(x_BTD) + self.proj_probe(probe_BTD), src_key_padding_mask=~mask_BT.bool())
        return self.skip(masked_mean(probe_BTD, mask_BT)) + self.out(self.norm(masked_mean(h_BTE, mask_BT)))
