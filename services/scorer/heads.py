"""Probe and Judge heads over the windows of a whole document (windows.py).

Probe: masked mean-pool of the layer-L_probe states of every token it reads → Linear(width + 5 →
n_dims), the extra inputs being the document's `doc_stats` (log length, fraction of tokens in a
repeated 8-gram, unfinished ending, sentence cohesion, opening heading: windows.py, token_stats.py). Cheap enough
to run on every document; its job is to drop the clearly bad ones before the expensive layers.

Judge: the tokens of all windows, concatenated and mean-pooled in segments of `judge_pool` tokens
(4 in the demo: the encoder's cost falls with the square of its length) → Linear(width → dim) of
the layer-L_judge states plus a projection of the same segments' layer-L_probe states plus an
embedding of each segment's document-position bucket plus a projection of its repeated-token
fraction → a transformer encoder with full attention over the document (padding masked) →
readout → LayerNorm → Linear(→ n_dims), built as a residual over a probe:

    judge(x) = Linear([mean(h_probe), doc_stats]) + out(readout(encoder(proj(h_judge) + proj_probe(h_probe)
                                                                        + pos + proj_rep(repeated))))

- Readout: the masked mean of the encoder's output concatenated with `readout_queries` learned
  attention pools (one softmax over the segments per query; `heads.judge_readout_queries`, 4 by
  default). Why the pools: a defect that sits in a few segments (a cut-off ending, a spam line) is
  diluted by every clean segment in a mean; an attention pool can put its weight there. Their
  cost, measured: they weight whichever sentences a window happens to read, so on the pairs
  benchmark a shuffled copy's score moved by 0.044 against its source in no consistent direction
  (Judge order 0.80-0.82; with the mean alone 0.85-0.86, two head seeds). The mean alone is not the
  default: on the end-to-end test's 60 held-out general documents its Judge fell below the Probe
  (0.70 vs 0.73).
- Skip path: a linear head on the Probe's own input. Why: on MiniLM how linearly the rubric labels
  read from mean-pooled states falls with depth (ridge, general rubric: 0.83 at the embeddings,
  0.75 at layer 5, 0.46 at layer 6; its last layer is tuned for sentence similarity), and a
  transformer head on a few hundred labels cannot recover that from layer 6 alone (0.40 held-out
  Spearman vs the Probe's 0.65).
- `out` is zero-initialised (ReZero/ControlNet-style), so the Judge starts as exactly a linear
  probe and the encoder learns a correction; with a random `out` the encoder's initial output
  swamps the skip and early stopping fires before either recovers (held-out Spearman 0.614 vs
  0.761 in an ablation).
- The position buckets (eighths of the document and one for its final token) let attention tell
  an ending from a middle (an unfinished last sentence), which a mean-pool cannot.
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

from services.scorer.windows import DOC_STATS, END_BUCKET


def masked_mean(x_BTD: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    m = mask_BT.to(x_BTD.dtype).unsqueeze(-1)
    return (x_BTD * m).sum(1) / m.sum(1).clamp_min(1.0)


# Bump when a head's architecture or its inputs change: the pipeline's distill stage keys on it,
# so an existing run directory retrains its heads instead of loading weights of another design.
HEADS_VERSION = 6


class Probe(nn.Module):
    def __init__(self, width: int, n_dims: int) -> None:
        super().__init__()
        self.out = nn.Linear(width + DOC_STATS, n_dims)

    def forward_pooled(self, pooled_BD: torch.Tensor, stats_BF: torch.Tensor) -> torch.Tensor:
        """pooled: mean layer-L_probe state of the tokens read; stats: `Windows.doc_stats`."""
        return self.out(torch.cat([pooled_BD, stats_BF.to(pooled_BD.dtype)], 1))


class HeadEnsemble(nn.Module):
    """Several Probes or Judges trained alike from different initial weights, read as their mean.

    Why: a head is fitted to a few hundred labels, so where it puts a document it has not seen
    depends on its initial weights as much as on the document. The spread between head seeds is
    as large as the effects the pairs benchmark measures (a shuffled copy against its source),
    and a mean of k members shrinks that part of the error by about √k while costing
    k head evaluations (the backbone, which dominates scoring, runs once). Same interface as one
    head, so training, calibration and the cascade do not change.
    """

    def __init__(self, members: list[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one head")
        self.members = nn.ModuleList(members)
        self.pool = getattr(members[0], "pool", 1)

    def _mean(self, method: str, *args):
        outs = [getattr(m, method)(*args) for m in self.members]
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(parts).mean(0) for parts in zip(*outs, strict=True))
        return torch.stack(outs).mean(0)

    def forward(self, *args) -> torch.Tensor:
        return self._mean("forward", *args)

    def forward_pooled(self, pooled_BD: torch.Tensor, stats_BF: torch.Tensor) -> torch.Tensor:
        return self._mean("forward_pooled", pooled_BD, stats_BF)

    def forward_segments(self, *args) -> torch.Tensor:
        return self._mean("forward_segments", *args)

    def forward_parts(self, *args) -> tuple[torch.Tensor, torch.Tensor]:
        return self._mean("forward_parts", *args)


def pool_tokens(p: int, x_BTD, probe_BTD, bucket_BT, rep_BT, mask_BT):
    """Mean of every `p` consecutive tokens (padding excluded): the Judge attends over T/p segments.

    A segment's bucket is its largest (so the document's final token keeps its END bucket), its
    repeated value the fraction of its tokens marked, and it is valid when any of its tokens is.
    """
    b, t = mask_BT.shape
    pad = (-t) % p
    if pad:
        x_BTD, probe_BTD = (nn.functional.pad(z, (0, 0, 0, pad)) for z in (x_BTD, probe_BTD))
        bucket_BT, rep_BT, mask_BT = (nn.functional.pad(z, (0, pad)) for z in (bucket_BT, rep_BT, mask_BT))
    m_BSP1 = mask_BT.to(x_BTD.dtype).view(b, -1, p, 1)
    count_BS1 = m_BSP1.sum(2).clamp_min(1.0)
    mean = lambda z: (z.view(b, -1, p, z.shape[-1]) * m_BSP1).sum(2) / count_BS1  # noqa: E731
    bucket_BS = (bucket_BT * mask_BT.to(bucket_BT.dtype)).view(b, -1, p).amax(2)
    rep_BS = mean(rep_BT.to(x_BTD.dtype).unsqueeze(-1)).squeeze(-1)
    return mean(x_BTD), mean(probe_BTD), bucket_BS, rep_BS, mask_BT.view(b, -1, p).any(2)


class EncoderBlock(nn.Module):
    """Pre-norm transformer block (attention + 2×-wide GELU MLP) on `F.scaled_dot_product_attention`,
    with dropout on the residual branches only.

    Why not `nn.TransformerEncoderLayer`: in training mode its dropout on the attention
    probabilities sends CPU attention down the unfused math path: 1.0 s for a [32, 256, 128] batch
    against 0.04 s for fused SDPA with the same padding mask (torch 2.13), which made the Judge's
    training the slowest part of the demo.
    """

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"judge_dim {dim} is not divisible by judge_heads {heads}")
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.attn_out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x_BTE: torch.Tensor, keep_B11T: torch.Tensor) -> torch.Tensor:
        b, t, e = x_BTE.shape
        q, k, v = self.qkv(self.norm1(x_BTE)).view(b, t, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        a_BHTK = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep_B11T)
        x_BTE = x_BTE + self.drop(self.attn_out(a_BHTK.transpose(1, 2).reshape(b, t, e)))
        return x_BTE + self.drop(self.mlp(self.norm2(x_BTE)))


class Judge(nn.Module):
    """Transformer head over a whole document's tokens, residual over a linear probe (module docstring)."""

    SKIP_PREFIX = "skip."  # parameters trained at the Probe's learning rate

    def __init__(self, width: int, n_dims: int, dim: int = 512, layers: int = 2, heads: int = 8,
                 dropout: float = 0.1, pool: int = 1, readout_queries: int = 4, segment_dropout: float = 0.0) -> None:
        super().__init__()
        self.pool, self.segment_dropout = pool, segment_dropout
        self.skip = nn.Linear(width + DOC_STATS, n_dims)
        self.proj = nn.Linear(width, dim)
        self.proj_probe = nn.Linear(width, dim, bias=False)
        self.proj_rep = nn.Linear(1, dim, bias=False)
        self.position = nn.Embedding(END_BUCKET + 1, dim)
        self.encoder = nn.ModuleList(EncoderBlock(dim, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.queries = nn.Linear(dim, readout_queries) if readout_queries else None
        self.out = nn.Linear(dim * (1 + readout_queries), n_dims)
        nn.init.zeros_(self.out.weight)  # start as the skip (a linear probe); the encoder learns a correction
        nn.init.zeros_(self.out.bias)

    def forward(self, x_BTD: torch.Tensor, mask_BT: torch.Tensor, probe_BTD: torch.Tensor, bucket_BT: torch.Tensor,
                rep_BT: torch.Tensor, stats_BF: torch.Tensor) -> torch.Tensor:
        """x: layer-L_judge states; probe: layer-L_probe states of the same tokens; mask: 1 = token;
        bucket: document-position bucket per token; rep: repeated-n-gram mark per token; stats:
        `Windows.doc_stats` of each document."""
        skip_in = torch.cat([masked_mean(probe_BTD, mask_BT), stats_BF.to(probe_BTD.dtype)], 1)
        if self.pool > 1:
            x_BTD, probe_BTD, bucket_BT, rep_BT, mask_BT = pool_tokens(self.pool, x_BTD, probe_BTD, bucket_BT, rep_BT,
                                                                       mask_BT)
        return self.forward_segments(x_BTD, mask_BT, probe_BTD, bucket_BT, rep_BT, skip_in)

    def forward_segments(self, x_BSD, mask_BS, probe_BSD, bucket_BS, rep_BS, skip_in_BF) -> torch.Tensor:
        """The Judge on already pooled segments; `skip_in` = [token mean of the layer-L_probe states, doc_stats]
        (training precomputes both once: the backbone is frozen, so they never change)."""
        skip_BN, correction_BN = self.forward_parts(x_BSD, mask_BS, probe_BSD, bucket_BS, rep_BS, skip_in_BF)
        return skip_BN + correction_BN

    def forward_parts(self, x_BSD, mask_BS, probe_BSD, bucket_BS, rep_BS, skip_in_BF) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_segments` as its two terms: the linear skip path and the encoder's correction."""
        rep_BS1 = rep_BS.to(x_BSD.dtype).unsqueeze(-1)
        tokens_BSE = self.proj(x_BSD) + self.proj_probe(probe_BSD) + self.position(bucket_BS) + self.proj_rep(rep_BS1)
        keep_BS = mask_BS.bool()
        if self.training and self.segment_dropout:
            kept_BS = torch.rand(keep_BS.shape, device=keep_BS.device) >= self.segment_dropout
            kept_BS = torch.where((keep_BS & kept_BS).any(1, keepdim=True), kept_BS, True)  # never a document's last
            keep_BS = keep_BS & kept_BS
        h_BSE = tokens_BSE
        for block in self.encoder:
            h_BSE = block(h_BSE, keep_BS[:, None, None, :])
        h_BSE = self.norm(h_BSE)
        readout = masked_mean(h_BSE, keep_BS)
        if self.queries is not None:
            scores_BSQ = self.queries(h_BSE).masked_fill(~keep_BS.unsqueeze(-1), float("-inf"))
            pooled_BQE = torch.einsum("bsq,bse->bqe", scores_BSQ.softmax(1), h_BSE)
            readout = torch.cat([readout, pooled_BQE.flatten(1)], 1)
        return self.skip(skip_in_BF), self.out(readout)
