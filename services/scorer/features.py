"""Backbone features for head training, cached on disk so training never reruns the backbone.

For each labelled document, read whole as windows (windows.py): the mean of the layer-L_probe
states over the tokens of the windows the Probe reads (all the Probe needs), the layer-L_judge
and layer-L_probe states of every read token in float16 with their document-position buckets and
repeated-n-gram marks (what the Judge attends over; heads.py says why it reads both layers), and
the document's `doc_stats` (log length, repeated fraction, unfinished ending, cohesion). Documents go
through the backbone in length-sorted micro-batches to limit padding. The cache file records the
backbone, layers, token budget and windowing, the documents' ids and a digest of their texts; a
mismatch recomputes instead of reusing stale features (a degraded copy keeps its id when the
degradation that made it changes, so ids alone would not do).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from services.scorer.backbone import LayerwiseBackbone
from services.scorer.windows import (
    DOC_STATS,
    WindowReader,
    document_batches,
    per_document,
    pool_per_document,
)


@torch.no_grad()
def extract(bb: LayerwiseBackbone, reader: WindowReader, texts: list[str], kinds: list[str], probe_layer: int,
            judge_layer: int, micro_batch: int = 16, progress=None) -> dict:
    n = len(texts)
    pooled = torch.zeros(n, bb.width)
    seqs: list[torch.Tensor | None] = [None] * n
    probe_seqs: list[torch.Tensor | None] = [None] * n
    buckets: list[torch.Tensor | None] = [None] * n
    repeated: list[torch.Tensor | None] = [None] * n
    stats = torch.zeros(n, DOC_STATS)
    coverage = torch.zeros(n)
    for idx in document_batches(texts, micro_batch, reader.budget_windows):
        win = reader.read([texts[i] for i in idx], [kinds[i] for i in idx])
        ids, am = win.input_ids.to(bb.device), win.attention_mask.to(bb.device)
        st = bb.run(bb.embed(ids, am), probe_layer)
        hp = bb.features(st).float()
        probe_rows = [r for r, flag in enumerate(win.probe_row) if flag]
        p = pool_per_document(hp[probe_rows], am[probe_rows], [win.doc[r] for r in probe_rows], len(idx)).cpu()
        hp_docs = per_document(hp.cpu(), am.cpu(), win.doc, len(idx))
        h = bb.features(bb.run(st, judge_layer)).float().cpu()
        h_docs = per_document(h, am.cpu(), win.doc, len(idx))
        b_docs = per_document(win.bucket, win.attention_mask, win.doc, len(idx))
        r_docs = per_document(win.repeated, win.attention_mask, win.doc, len(idx))
        doc_stats = win.doc_stats()
        for j, i in enumerate(idx):
            pooled[i], stats[i] = p[j], doc_stats[j]
            seqs[i] = h_docs[j].to(torch.float16).clone()
            probe_seqs[i] = hp_docs[j].to(torch.float16).clone()
            buckets[i] = b_docs[j].to(torch.uint8).clone()
            repeated[i] = r_docs[j].to(torch.uint8).clone()
            coverage[i] = win.tokens_read[j] / max(1, win.tokens_total[j])
        if progress is not None:
            progress.update(len(idx))
    return {"pooled": pooled, "seqs": seqs, "probe_seqs": probe_seqs, "buckets": buckets, "repeated": repeated,
            "doc_stats": stats, "coverage": coverage}


def texts_digest(texts: list[str]) -> str:
    """SHA-256 over the texts, each length-prefixed (so no two lists of texts share a digest by concatenation)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def cached_extract(path: str | Path, meta: dict, ids: list[str], texts: list[str], compute) -> dict:
    """Load features for `ids` from `path` when its meta, ids and texts match, else compute() and save."""
    path = Path(path)
    digest = texts_digest(texts)
    if path.exists():
        blob = torch.load(path, weights_only=False)
        if blob.get("meta") == meta and blob.get("ids") == ids and blob.get("texts_sha256") == digest:
            blob["cached"] = True
            return blob
    feats = compute()
    blob = {"meta": meta, "ids": ids, "texts_sha256": digest, **feats}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(blob, tmp)
    os.replace(tmp, path)
    blob["cached"] = False
    return blob


def pad_seqs(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad a list of [T_i, ...] tensors to [B, T, ...] (float32, or long for integer inputs) with a [B, T] mask."""
    t = max(s.shape[0] for s in seqs)
    dtype = torch.long if not seqs[0].is_floating_point() else torch.float32
    x = torch.zeros(len(seqs), t, *seqs[0].shape[1:], dtype=dtype)
    m = torch.zeros(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        x[i, : s.shape[0]] = s.to(dtype)
        m[i, : s.shape[0]] = True
    return x, m
