"""Probe and Judge heads (design: "Quality rubric"), over the windows of a whole document (windows.py).

Probe: masked mean-pool of the layer-L_probe states of every token read → Linear(width + 1 →
n_dims), the extra input being the document's log length. Cheap enough to run on every document;
its job is to drop the clearly bad ones before the expensive layers.

Judge: the tokens of all windows, concatenated → Linear(width → dim) of the layer-L_judge states
plus a projection of the same tokens' layer-L_probe states plus an embedding of each token's
document-position bucket → a transformer encoder with full attention over the document (padding
masked) → masked mean-pool → LayerNorm → Linear(dim → n_dims), built as a residual over a probe:

    judge(x) = Linear([mean(h_probe), log_len]) + out(encoder(proj(h_judge) + proj_probe(h_probe) + pos))

- Skip path: a linear head on the Probe's own input. Why: on MiniLM how linearly the rubric labels
  read from mean-pooled states falls with depth (ridge, general rubric: 0.83 at the embeddings,
  0.75 at layer 5, 0.46 at layer 6; its last layer is tuned for sentence similarity), and a
  transformer head on a few hundred labels cannot recover that from layer 6 alone (0.40 held-out
  Spearman vs the Probe's 0.65, docs/scorer.md).
- `out` is zero-initialised (ReZero/ControlNet-style), so the Judge starts as exactly a linear
  probe and the encoder learns a correction; with a random `out` the encoder's initial output
  swamps the skip and early stopping fires before either recovers (0.61 vs 0.73 measured).
- The position buckets (eighths of the document and one for its final token) let attention tell
  an ending from a middle (an unfinished last sentence), and compare distant windows (a repeated
  paragraph), which a mean-pool cannot.
The cascade already holds the layer-L_probe states of every document that reaches the Judge, so
the extra inputs cost one (width × dim) projection per token and no backbone compute.

Both predict the rubric dimensions scaled to [0, 1] (score / max) and are trained with mean
squared error: the labels are ordinal integers on a small scale, regression keeps their order and
distance, and a continuous output is what the keep/drop thresholds are calibrated on (the
FineWeb-Edu classifier makes the same choice).
"""

from __future__ import annotations

import torch
from torch import nn

from services.scorer.windows import END_BUCKET


def masked_mean(x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    m = mask_BT.to(x_BTD.dtype).unsqueeze(-1)
    return (x_BTD * m).sum(1) / m.sum(1).clamp_min(1.0)


# Bump when a head's architecture or its inputs change: the pipeline's distill stage keys on it,
# so an existing run directory retrains its heads instead of loading weights of another design.
HEADS_VERSION = 3


class Probe(nn.Module):
    def __init__(self, width: int, n_dims: int) -> None:
        super().__init__()
        self.out = nn.Linear(width + 1, n_dims)

    def forward_pooled(self, pooled_BD: torch.Tensor, log_len_B1: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cat([pooled_BD, log_len_B1.to(pooled_BD.dtype)], 1))


class Judge(nn.Module):
    """Transformer head over a whole document's tokens, residual over a linear probe (module docstring)."""

    SKIP_PREFIX = "skip."  # parameters trained at the Probe's learning rate

    def __init__(self, width: int, n_dims: int, dim: int = 512, layers: int = 2, heads: int = 8,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.skip = nn.Linear(width + 1, n_dims)
        self.proj = nn.Linear(width, dim)
        self.proj_probe = nn.Linear(width, dim, bias=False)
        self.position = nn.Embedding(END_BUCKET + 1, dim)
        block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, n_dims)
        nn.init.zeros_(self.out.weight)  # start as the skip (a linear probe); the encoder learns a correction
        nn.init.zeros_(self.out.bias)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor, probe_BTD: torch.Tensor, bucket_BT: torch.Tensor,
                log_len_B1: torch.Tensor) -> torch.Tensor:
        """x: layer-L_judge states; probe: layer-L_probe states of the same tokens; mask: 1 = token;
        bucket: document-position bucket per token; log_len: windows.log_length of each document."""
        tokens_BTE = self.proj(x_BTD) + self.proj_probe(probe_BTD) + self.position(bucket_BT)
        h_BTE = self.encoder(tokens_BTE, src_key_padding_mask=~mask_BT.bool())
        pooled = torch.cat([masked_mean(probe_BTD, mask_BT), log_len_B1.to(probe_BTD.dtype)], 1)
        return self.skip(pooled) + self.out(self.norm(masked_mean(h_BTE, mask_BT)))
