"""The early-exit cascade: layers [0, L_probe) → Probe → (survivors only) layers [L_probe, L_judge) → Judge.

Every document is read whole as windows (windows.py). The Probe reads `heads.probe_windows` of
them (all by default) through layers [0, L_probe). A document is dropped right there when the
Probe's quality falls more than τ_drop below its source's keep threshold — its Probe margin,
`probe_quality − τ_keep(source)`, is under τ_drop (calibrate.py says why a margin) — and kept
right there, on the Probe's word, when its margin is above τ_accept. Either way its remaining
windows are never read and none of its windows enters layer L_probe or any later layer (the
backbone counts layer calls, tests check it). Survivors read their other windows through
[0, L_probe), then all of them through [L_probe, L_judge); layers after L_judge never run.
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
from services.scorer.calibrate import POOLED
from services.scorer.features import pad_seqs
from services.scorer.heads import HEADS_VERSION, HeadEnsemble, Judge, Probe
from services.scorer.rubrics import rubric_for
from services.scorer.windows import (
    WindowReader,
    Windows,
    document_batches,
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
        probe = _loaded(h["probe"], Probe, width, n)
        judge = _loaded(h["judge"], Judge, width, n, **h["judge_cfg"])
        heads[name] = (probe.eval(), judge.eval())
    return heads


def _loaded(state: dict | list[dict], cls: type[torch.nn.Module], *args, **kwargs) -> torch.nn.Module:
    """One head from its state dict, or the mean of an ensemble from its members' (`heads.members`)."""
    heads = []
    for one in [state] if isinstance(state, dict) else state:
        heads.append(cls(*args, **kwargs))
        heads[-1].load_state_dict(one)
    return heads[0] if isinstance(state, dict) else HeadEnsemble(heads)


def reader_for(bb: LayerwiseBackbone, meta: dict) -> WindowReader:
    """The window reader heads.pt was trained with (its meta records the windowing)."""
    return WindowReader.from_meta(bb.tokenizer, meta)


def _stack_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows of two [R, T, ...] tensors in one, right-padded with zeros to the wider T."""
    t = max(a.shape[1], b.shape[1])
    pad = lambda z: torch.nn.functional.pad(z, (0, 0) * (z.dim() - 2) + (0, t - z.shape[1]))  # noqa: E731
    return torch.cat([pad(a), pad(b)])


class CascadeScorer:
    def __init__(self, bb: LayerwiseBackbone, heads: dict, probe_layer: int, judge_layer: int, reader: WindowReader,
                 tau_drop: dict[str, float] | None = None, tau_keep: dict[str, float] | None = None,
                 micro_batch: int = 16, tau_accept: dict[str, float] | None = None) -> None:
        self.bb, self.heads, self.reader = bb, heads, reader
        self.probe_layer, self.judge_layer = probe_layer, judge_layer
        self.micro_batch = micro_batch
        self.tau_drop = tau_drop or {}
        self.tau_keep = tau_keep or {}
        self.tau_accept = tau_accept or {}

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
                   cal.get("tau_keep"), scfg.scoring.micro_batch, cal.get("tau_accept"))

    def keep_threshold(self, source: str, kind: str) -> float:
        return float(self.tau_keep.get(source, self.tau_keep.get(f"kind:{kind}", math.inf)))

    def settle(self, probe_q: float, source: str, kind: str, rubric: str) -> bool | None:
        """What the Probe decides alone: False (dropped: its margin over its source's τ_keep is under
        τ_drop), True (kept: the margin is over τ_accept), None (the Judge decides). The rubric's
        thresholds, else the pooled ones; without a τ_keep the Probe settles nothing."""
        tau_keep = self.keep_threshold(source, kind)
        if not math.isfinite(tau_keep):
            return None
        margin = probe_q - tau_keep
        if margin < self.tau_drop.get(rubric, self.tau_drop.get(POOLED, -math.inf)):
            return False
        if margin > self.tau_accept.get(rubric, self.tau_accept.get(POOLED, math.inf)):
            return True
        return None

    @torch.no_grad()
    def score(self, texts: list[str], kinds: list[str], sources: list[str] | None = None,
              mode: str = "cascade") -> dict[str, np.ndarray]:
        if mode not in ("cascade", "judge", "probe"):
            raise ValueError(f"mode={mode!r}; expected cascade, judge or probe")
        sources = sources if sources is not None else list(kinds)
        n = len(texts)
        probe_q, judge_q, coverage = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
        probe_kept = np.zeros(n, dtype=bool)
        rubric_names = [rubric_for(k).name for k in kinds]
        for idx in document_batches(texts, self.micro_batch, self.reader.budget_windows):
            win = self.reader.read([texts[i] for i in idx], [kinds[i] for i in idx])
            coverage[idx] = np.array(win.tokens_read) / np.maximum(1, np.array(win.tokens_total))
            docs = [(rubric_names[i], sources[i], kinds[i]) for i in idx]
            probe_q[idx], judge_q[idx], probe_kept[idx] = self._score_batch(win, docs, mode)
        quality = np.where(np.isnan(judge_q), probe_q, judge_q)
        tau = np.array([self.keep_threshold(s, k) for s, k in zip(sources, kinds, strict=True)])
        keep = quality >= tau
        if mode == "cascade":
            keep = np.where(np.isnan(judge_q), probe_kept, keep)
        return {"probe_quality": probe_q, "judge_quality": judge_q, "quality": quality, "keep": keep,
                "judge_skipped": np.isnan(judge_q), "probe_kept": probe_kept, "read_fraction": coverage}

    def _score_batch(self, win: Windows, docs: list[tuple[str, str, str]],
                     mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Probe and Judge quality (NaN where not computed) of one micro-batch, and which documents the
        Probe kept without the Judge; docs = (rubric, source, kind)."""
        dev, n = self.bb.device, len(docs)
        probe_q, judge_q, probe_kept = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=bool)
        stats = win.doc_stats().to(dev)
        ids, am = win.input_ids.to(dev), win.attention_mask.to(dev)
        first = [r for r, flag in enumerate(win.probe_row) if flag or mode == "judge"]  # rows the first leg reads
        st = self.bb.run(self.bb.embed(ids[first], am[first]), self.probe_layer)
        hp = self.bb.features(st)
        survivors = list(range(n))
        if mode != "judge":
            pooled = pool_per_document(hp, st.attention_mask, [win.doc[r] for r in first], n)
            for name, members in self._by_rubric(docs, survivors).items():
                probe_q[members] = self._quality(self.heads[name][0].forward_pooled(pooled[members], stats[members]))
            if mode == "probe":
                return probe_q, judge_q, probe_kept
            settled = [self.settle(probe_q[d], docs[d][1], docs[d][2], docs[d][0]) for d in range(n)]
            probe_kept[:] = [s is True for s in settled]
            survivors = [d for d in range(n) if settled[d] is None]
            if not survivors:
                return probe_q, judge_q, probe_kept
        alive = set(survivors)
        read = [k for k, r in enumerate(first) if win.doc[r] in alive]  # first-leg rows the survivors keep
        first_rows = set(first)
        rest = [r for r in range(len(win.doc)) if win.doc[r] in alive and r not in first_rows]
        st_read = self.bb.select(st, torch.as_tensor(read, device=dev)) if len(read) < len(first) else st
        legs = [(st_read, [first[k] for k in read])]
        if rest:
            legs.append((self.bb.run(self.bb.embed(ids[rest], am[rest]), self.probe_layer), rest))
        h, hp2, mask, rows = None, None, None, []
        for leg, leg_rows in legs:
            hj, hpl, ml = self.bb.features(self.bb.run(leg, self.judge_layer)), self.bb.features(leg), leg.attention_mask
            h, hp2, mask = (hj, hpl, ml) if h is None else (_stack_rows(h, hj), _stack_rows(hp2, hpl),
                                                            _stack_rows(mask.unsqueeze(-1), ml.unsqueeze(-1)).squeeze(-1))
            rows += leg_rows
        local = {d: k for k, d in enumerate(survivors)}
        row_doc = [local[win.doc[r]] for r in rows]
        t = mask.shape[1]
        bucket, rep = win.bucket[rows][:, :t].to(dev), win.repeated[rows][:, :t].to(dev)
        per = lambda x: per_document(x, mask, row_doc, len(survivors))  # noqa: E731
        seqs, probe_seqs, buckets, reps = per(h), per(hp2), per(bucket), per(rep)
        for name, members in self._by_rubric(docs, survivors).items():
            sel = [local[d] for d in members]
            x, m = pad_seqs([seqs[k] for k in sel])
            xp, _ = pad_seqs([probe_seqs[k] for k in sel])
            b, _ = pad_seqs([buckets[k] for k in sel])
            r, _ = pad_seqs([reps[k] for k in sel])
            judge, dtype = self.heads[name][1], h.dtype
            judge_q[members] = self._quality(judge(x.to(dev, dtype), m.to(dev), xp.to(dev, dtype), b.to(dev),
                                                   r.to(dev, dtype), stats[members]))
        return probe_q, judge_q, probe_kept

    @staticmethod
    def _by_rubric(docs: list[tuple[str, str, str]], members: list[int]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for d in members:
            groups.setdefault(docs[d][0], []).append(d)
        return groups

    @staticmethod
    def _quality(pred: torch.Tensor) -> np.ndarray:
        """Aggregate quality in [0, 1] per row: mean of predicted dimensions (already scaled by the maximum)."""
        return pred.float().clamp(0, 1).mean(1).cpu().numpy()
