"""The early-exit cascade: layers [0, L_probe) → Probe → (survivors only) layers [L_probe, L_judge) → Judge.

Every document is read whole as windows (windows.py). A document whose Probe quality is below its
rubric's τ_drop is dropped right there: none of its windows enters layer L_probe or any later
layer (the backbone counts layer calls, tests check it). Layers after L_judge are never run.
Documents are scored in length-sorted micro-batches to limit padding. Modes for comparison:
`judge` (every document through L_judge, no Probe) and `probe` (stop at L_probe and keep on the
Probe's score).

The Judge reads the survivors' layer-L_judge tokens and their layer-L_probe states (kept from the
first leg; heads.py says why): no backbone layer runs twice or beyond L_judge.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from services.scorer.backbone import LayerwiseBackbone
from services.scorer.features import pad_seqs
from services.scorer.heads import HEADS_VERSION, Judge, Probe
from services.scorer.rubrics import rubric_for
from services.scorer.windows import (
    WindowReader,
    document_batches,
    log_length,
    per_document,
    pool_per_document,
)

HEADS_FILE = "heads.pt"
CALIBRATION_FILE = "calibration.json"


def build_heads(blob: dict, width: int) -> dict:
    """The (Probe, Judge) of every rubric in a heads.pt blob; refuses heads of another `HEADS_VERSION`.

    The version is what `moelab score train` wrote (files without one are version 1). The
    pipeline's distill stage is keyed by the same number, so it retrains instead of landing here.
    """
    version = blob.get("meta", {}).get("heads_version", 1)
    if version != HEADS_VERSION:
        raise ValueError(f"heads.pt holds version-{version} heads; this moelab's heads are version {HEADS_VERSION} "
                         "(the heads' architecture or inputs changed): rerun `moelab score train`")
    heads = {}
    for name, h in blob["rubrics"].items():
        n = len(h["dims"])
        probe = Probe(width, n)
        probe.load_state_dict(h["probe"])
        judge = Judge(width, n, **h["judge_cfg"])
        judge.load_state_dict(h["judge"])
        heads[name] = (probe.eval(), judge.eval())
    return heads


def reader_for(bb: LayerwiseBackbone, meta: dict) -> WindowReader:
    """The window reader heads.pt was trained with (its meta records the windowing)."""
    return WindowReader(bb.tokenizer, meta["window_tokens"], meta["max_tokens"], meta["window_policy"],
                        meta["code_layout"])


class CascadeScorer:
    def __init__(self, bb: LayerwiseBackbone, heads: dict, probe_layer: int, judge_layer: int, reader: WindowReader,
                 tau_drop: dict[str, float] | None = None, tau_keep: dict[str, float] | None = None,
                 micro_batch: int = 16) -> None:
        self.bb, self.heads, self.reader = bb, heads, reader
        self.probe_layer, self.judge_layer = probe_layer, judge_layer
        self.micro_batch = micro_batch
        self.tau_drop = tau_drop or {}
        self.tau_keep = tau_keep or {}

    @classmethod
    def load(cls, out_dir: str | Path, scfg, device: str = "cpu") -> CascadeScorer:
        import json

        out_dir = Path(out_dir)
        blob = torch.load(out_dir / HEADS_FILE, weights_only=False)
        meta = blob["meta"]
        bb = LayerwiseBackbone.load(meta["backbone"], dtype=scfg.scoring.dtype, device=device)
        heads = build_heads(blob, bb.width)
        for probe, judge in heads.values():
            probe.to(device=bb.device, dtype=bb.model.dtype)
            judge.to(device=bb.device, dtype=bb.model.dtype)
        cal_path = out_dir / CALIBRATION_FILE
        cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
        return cls(bb, heads, meta["probe_layer"], meta["judge_layer"], reader_for(bb, meta), cal.get("tau_drop"),
                   cal.get("tau_keep"), scfg.scoring.micro_batch)

    def keep_threshold(self, source: str, kind: str) -> float:
        return float(self.tau_keep.get(source, self.tau_keep.get(f"kind:{kind}", math.inf)))

    @torch.no_grad()
    def score(self, texts: list[str], kinds: list[str], sources: list[str] | None = None,
              mode: str = "cascade") -> dict[str, np.ndarray]:
        if mode not in ("cascade", "judge", "probe"):
            raise ValueError(f"mode={mode!r}; expected cascade, judge or probe")
        sources = sources if sources is not None else list(kinds)
        n = len(texts)
        probe_q, judge_q, coverage = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
        rubric_names = [rubric_for(k).name for k in kinds]
        for idx in document_batches(texts, self.micro_batch, self.reader.budget_windows):
            self._score_batch(idx, texts, kinds, rubric_names, mode, probe_q, judge_q, coverage)
        quality = np.where(np.isnan(judge_q), probe_q, judge_q)
        tau = np.array([self.keep_threshold(s, k) for s, k in zip(sources, kinds, strict=True)])
        keep = quality >= tau
        if mode == "cascade":
            keep &= ~np.isnan(judge_q)
        return {"probe_quality": probe_q, "judge_quality": judge_q, "quality": quality, "keep": keep,
                "judge_skipped": np.isnan(judge_q), "read_fraction": coverage}

    def _score_batch(self, idx, texts, kinds, rubric_names, mode, probe_q, judge_q, coverage) -> None:
        win = self.reader.read([texts[i] for i in idx], [kinds[i] for i in idx])
        dev = self.bb.device
        ids, am = win.input_ids.to(dev), win.attention_mask.to(dev)
        coverage[idx] = np.array(win.tokens_read) / np.maximum(1, np.array(win.tokens_total))
        log_len = log_length(win.tokens_total).to(dev)
        # every mode runs layers [0, L_probe) first: the Judge reads the layer-L_probe states too
        st = self.bb.run(self.bb.embed(ids, am), self.probe_layer)
        hp = self.bb.features(st)
        survivors = list(range(len(idx)))
        if mode != "judge":
            pooled = pool_per_document(hp, am, win.doc, len(idx))
            for name, docs in self._by_rubric(idx, survivors, rubric_names).items():
                q = self._quality(self.heads[name][0].forward_pooled(pooled[docs], log_len[docs]))
                probe_q[[idx[j] for j in docs]] = q
            if mode == "probe":
                return
            survivors = [j for j, i in enumerate(idx) if probe_q[i] >= self.tau_drop.get(rubric_names[i], -math.inf)]
            if not survivors:
                return
        rows = [r for r, d in enumerate(win.doc) if d in set(survivors)]
        local = {j: k for k, j in enumerate(survivors)}
        row_doc = [local[win.doc[r]] for r in rows]
        if len(rows) < len(win.doc):
            keep = torch.as_tensor(rows, device=dev)
            st = self.bb.select(st, keep)
            hp, am = hp[keep][:, : st.hidden.shape[1]], am[keep][:, : st.hidden.shape[1]]
            bucket = win.bucket[rows][:, : st.hidden.shape[1]]
        else:
            bucket = win.bucket
        h = self.bb.features(self.bb.run(st, self.judge_layer))
        seqs = per_document(h, am, row_doc, len(survivors))
        probe_seqs = per_document(hp, am, row_doc, len(survivors))
        buckets = per_document(bucket.to(dev), am, row_doc, len(survivors))
        for name, docs in self._by_rubric(idx, survivors, rubric_names).items():
            sel = [local[j] for j in docs]
            x, m = pad_seqs([seqs[k] for k in sel])
            xp, _ = pad_seqs([probe_seqs[k] for k in sel])
            b, _ = pad_seqs([buckets[k] for k in sel])
            judge = self.heads[name][1]
            dtype = h.dtype
            q = self._quality(judge(x.to(dev, dtype), m.to(dev), xp.to(dev, dtype), b.to(dev), log_len[docs]))
            judge_q[[idx[j] for j in docs]] = q

    @staticmethod
    def _by_rubric(idx: list[int], rows, rubric_names: list[str]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for j in rows:
            groups.setdefault(rubric_names[idx[j]], []).append(j)
        return groups

    @staticmethod
    def _quality(pred: torch.Tensor) -> np.ndarray:
        """Aggregate quality in [0, 1] per row: mean of predicted dimensions (already scaled by the maximum)."""
        return pred.float().clamp(0, 1).mean(1).cpu().numpy()
