"""Backbone features for head training, cached on disk so training never reruns the backbone.

For each labelled document: the masked mean of layer-L_probe hidden states (all the Probe needs),
and the unpadded layer-L_judge and layer-L_probe sequences in float16 (what the Judge attends
over; see heads.py for why it reads both). Documents go
through the backbone in length-sorted micro-batches to limit padding. The cache file records the
backbone, layers and token budget; a mismatch recomputes instead of reusing stale features.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from services.scorer.backbone import LayerwiseBackbone
from services.scorer.heads import masked_mean


def length_buckets(texts: list[str], micro_batch: int) -> list[list[int]]:
    """Indices grouped into micro-batches of similar length (sorted by character count)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    return [order[i : i + micro_batch] for i in range(0, len(order), micro_batch)]


@torch.no_grad()
def extract(bb: LayerwiseBackbone, texts: list[str], probe_layer: int, judge_layer: int, max_tokens: int,
            micro_batch: int = 16, progress=None) -> dict:
    n = len(texts)
    pooled = torch.zeros(n, bb.width)
    seqs: list[torch.Tensor | None] = [None] * n
    probe_seqs: list[torch.Tensor | None] = [None] * n
    for idx in length_buckets(texts, micro_batch):
        ids, am = bb.tokenize([texts[i] for i in idx], max_tokens)
        st = bb.run(bb.embed(ids, am), probe_layer)
        hp = bb.features(st).float()
        p = masked_mean(hp, am).cpu()
        hp = hp.cpu()
        st = bb.run(st, judge_layer)
        h = bb.features(st).float().cpu()
        lens = am.sum(1).tolist()
        for j, i in enumerate(idx):
            pooled[i] = p[j]
            seqs[i] = h[j, : lens[j]].to(torch.float16).clone()
            probe_seqs[i] = hp[j, : lens[j]].to(torch.float16).clone()
        if progress is not None:
            progress.update(len(idx))
    return {"pooled": pooled, "seqs": seqs, "probe_seqs": probe_seqs}


def cached_extract(path: str | Path, meta: dict, ids: list[str], compute) -> dict:
    """Load features for `ids` from `path` when its meta matches, else compute(ids→feats) and save."""
    path = Path(path)
    if path.exists():
        blob = torch.load(path, weights_only=False)
        if blob.get("meta") == meta and blob.get("ids") == ids:
            blob["cached"] = True
            return blob
    feats = compute()
    blob = {"meta": meta, "ids": ids, **feats}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    blob["cached"] = False
    return blob


def pad_seqs(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a list of [T_i, D] tensors to [B, T, D] float32 with a [B, T] mask."""
    t = max(s.shape[0] for s in seqs)
    x = torch.zeros(len(seqs), t, seqs[0].shape[1])
    m = torch.zeros(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        x[i, : s.shape[0]] = s.float()
        m[i, : s.shape[0]] = True
    return x, m
