"""Train the Probe and Judge heads on oracle labels, with early stopping on a validation split.

Targets are the rubric dimensions divided by the scale maximum; the loss is MSE (see heads.py for
why regression). AdamW, shuffled mini-batches, evaluation on the validation split each epoch; the
best epoch's weights are restored when validation loss has not improved for `patience` epochs.
The Judge's skip path is a linear probe and trains at the Probe's learning rate (`heads.lr`); its
encoder path at `heads.judge_lr`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from services.scorer.features import pad_seqs
from services.scorer.heads import Judge, Probe, pool_tokens


def split_indices(n: int, val_fraction: float, test_fraction: float, seed: int,
                  groups: list[str] | None = None) -> dict[str, np.ndarray]:
    """Deterministic train/val/test split of n items (each split gets at least one group when there are >= 3).

    `groups` (one name per item) keeps items of a group together: a document and its degraded
    copies share a split, so no test document has a near-copy in training.
    """
    names = list(groups) if groups is not None else [str(i) for i in range(n)]
    unique = sorted(set(names), key=names.index)
    perm = np.random.default_rng(seed).permutation(len(unique))
    n_test = max(1, int(round(len(unique) * test_fraction)))
    n_val = max(1, int(round(len(unique) * val_fraction)))
    part = {unique[g]: ("test" if k < n_test else "val" if k < n_test + n_val else "train") for k, g in enumerate(perm)}
    return {s: np.array([i for i in range(n) if part[names[i]] == s], dtype=np.int64) for s in ("test", "val", "train")}


@dataclass
class TrainResult:
    head: nn.Module
    best_epoch: int
    epochs_run: int
    best_val_loss: float
    history: list[dict]


def _batches(idx: np.ndarray, bs: int, rng: np.random.Generator | None):
    order = rng.permutation(idx) if rng is not None else idx
    for i in range(0, len(order), bs):
        yield order[i : i + bs]


def _forward(head: nn.Module, kind: str, feats: dict, rows: np.ndarray, parts: bool = False):
    r = torch.as_tensor(rows)
    stats = feats["doc_stats"][r]
    if kind == "probe":
        return head.forward_pooled(feats["pooled"][r], stats)
    x, m, xp, b, rep, skip_mean = (t[r] for t in judge_inputs(feats, head.pool))
    t = int(m.sum(1).max())  # trim the padding this batch does not need
    forward = head.forward_parts if parts else head.forward_segments  # parts: (skip path, encoder correction)
    return forward(x[:, :t].float(), m[:, :t], xp[:, :t].float(), b[:, :t], rep[:, :t].float(),
                   torch.cat([skip_mean, stats], 1))


def judge_inputs(feats: dict, pool: int) -> tuple[torch.Tensor, ...]:
    """Every document's Judge segments, pooled and padded once (float16) and cached in `feats`, and the
    token mean of its layer-L_probe states (the skip path's input; the Probe's pooled input covers only
    the windows the Probe reads).

    Padding per batch from ragged per-document tensors took 40% of an epoch (0.24 s a batch)."""
    key = f"_judge_segments_{pool}"
    if key not in feats:
        parts, means = [], []
        for i in range(len(feats["seqs"])):
            one = [feats[k][i].unsqueeze(0).float() for k in ("seqs", "probe_seqs")]
            b = feats["buckets"][i].unsqueeze(0).long()
            rep = feats["repeated"][i].unsqueeze(0).float()
            m = torch.ones(b.shape, dtype=torch.bool)
            means.append(one[1][0].mean(0))
            parts.append(pool_tokens(pool, one[0], one[1], b, rep, m) if pool > 1 else (one[0], one[1], b, rep, m))
        x, m = pad_seqs([p[0][0].half() for p in parts])
        xp, _ = pad_seqs([p[1][0].half() for p in parts])
        b, _ = pad_seqs([p[2][0] for p in parts])
        rep, _ = pad_seqs([p[3][0].half() for p in parts])
        feats[key] = (x.half(), m, xp.half(), b, rep.half(), torch.stack(means))
    return feats[key]


def predict(head: nn.Module, kind: str, feats: dict, rows: np.ndarray, bs: int = 64) -> np.ndarray:
    head.eval()
    outs = []
    with torch.no_grad():
        for b in _batches(np.asarray(rows), bs, None):
            outs.append(_forward(head, kind, feats, b).float())
    return torch.cat(outs).numpy() if outs else np.zeros((0, 0))


def source_pairs(groups: list[str], degradation: list[str], rows: np.ndarray) -> np.ndarray:
    """[(source row, degraded-copy row)] among `rows`: every copy whose source document is there too."""
    rows = set(int(r) for r in rows)
    clean = {g: i for i, (g, d) in enumerate(zip(groups, degradation, strict=True)) if not d and i in rows}
    pairs = [(clean[g], i) for i, (g, d) in enumerate(zip(groups, degradation, strict=True))
             if d and i in rows and g in clean]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def _pair_loss(head, kind, feats, pairs: np.ndarray, margin: float, correction_weight: float = 0.0) -> torch.Tensor:
    """Hinge on aggregate quality: a degraded copy must score at least `margin` below its source.

    With `correction_weight` (Judge only), plus that weight × a hinge at margin 0 on the encoder's
    correction alone: the correction may leave a pair as the skip path ranks it, but not reverse it.
    """
    if kind != "judge" or not correction_weight:
        q = _forward(head, kind, feats, pairs.reshape(-1)).clamp(0, 1).mean(1).view(-1, 2)
        return nn.functional.relu(margin - (q[:, 0] - q[:, 1])).mean()
    skip, correction = _forward(head, kind, feats, pairs.reshape(-1), parts=True)
    q = (skip + correction).clamp(0, 1).mean(1).view(-1, 2)
    c = correction.mean(1).view(-1, 2)
    return nn.functional.relu(margin - (q[:, 0] - q[:, 1])).mean() + correction_weight * nn.functional.relu(c[:, 1] - c[:, 0]).mean()


def _statistics_pair_loss(head, kind, feats, pairs: np.ndarray, margin: float) -> torch.Tensor:
    """The pair hinge once more, on each source read as it is and read with its copy's defect statistics.

    A real pair mixes the defect with sampling: a shuffled copy's windows read other sentences than
    its source's, and that moves the heads' scores by ±0.04, as much as a shuffle moves
    them through `sentence_cohesion`. Here the windows are the source's in both terms and only the
    copy's repeated fraction, unfinished ending, cohesion and heading (`doc_stats` after log length)
    replace the source's, so the difference is what the heads make of those statistics alone, and the
    hinge asks it to rank the copy below. Pairs whose statistics are equal add nothing. The Judge
    reads the statistics only in its linear skip path, so its encoder is not run for this term.
    """
    src, cp = torch.as_tensor(pairs[:, 0]), torch.as_tensor(pairs[:, 1])
    stats = feats["doc_stats"]
    virtual = torch.cat([stats[src][:, :1], stats[cp][:, 1:]], 1)
    differ = (virtual != stats[src]).any(1)
    if not bool(differ.any()):
        return torch.zeros(())
    src, own, virtual = src[differ], stats[src][differ], virtual[differ]
    if kind == "probe":
        pooled = feats["pooled"][src]
        a, b = head.forward_pooled(pooled, own), head.forward_pooled(pooled, virtual)
    else:
        mean = judge_inputs(feats, head.pool)[5][src].float()
        a, b = head.skip(torch.cat([mean, own], 1)), head.skip(torch.cat([mean, virtual], 1))
    return nn.functional.relu(margin - (a - b).mean(1)).mean()


def _objective(head, kind, feats, targets, rows, pairs, hcfg) -> float:
    """Validation objective: MSE on the rows plus the pair hinges on their pairs, weighted as in training."""
    val = float(np.mean((predict(head, kind, feats, rows) - targets[rows]) ** 2))
    if not len(pairs):
        return val
    with torch.no_grad():
        if getattr(hcfg, "pair_weight", 0.0):
            val += hcfg.pair_weight * float(_pair_loss(head.eval(), kind, feats, pairs, hcfg.pair_margin,
                                                       getattr(hcfg, "judge_correction_pair_weight", 0.0)))
        if getattr(hcfg, "statistics_pair_weight", 0.0):
            val += hcfg.statistics_pair_weight * float(_statistics_pair_loss(head.eval(), kind, feats, pairs,
                                                                             hcfg.pair_margin))
    return val


def train_head(kind: str, feats: dict, targets: np.ndarray, train_idx: np.ndarray, val_idx: np.ndarray, hcfg,
               width: int, progress=None, pairs: tuple[np.ndarray, np.ndarray] | None = None,
               member: int = 0) -> TrainResult:
    """Fit a Probe (`kind='probe'`) or Judge (`kind='judge'`) on targets in [0, 1].

    `pairs` (train pairs, val pairs of (source, degraded copy) rows, `source_pairs`) add
    `heads.pair_weight` × a margin hinge that ranks each copy below its source: the oracle's
    integer labels often tie a document and its copy (both round to the same rubric points), so
    MSE alone teaches little about the difference. `heads.statistics_pair_weight` adds the same
    hinge on each source read with its copy's defect statistics (`_statistics_pair_loss`). Each
    step draws half as many pairs as documents.
    `member` k of an ensemble (`heads.members`) starts from seed `heads.seed + k` (initial weights
    and batch order); the split stays the one `heads.seed` drew.
    """
    seed = hcfg.seed + member
    torch.manual_seed(seed)
    n_dims = targets.shape[1]
    head = Probe(width, n_dims) if kind == "probe" else Judge(width, n_dims, hcfg.judge_dim, hcfg.judge_layers,
                                                              hcfg.judge_heads, pool=getattr(hcfg, "judge_pool", 1),
                                                              readout_queries=getattr(hcfg, "judge_readout_queries", 4),
                                                              segment_dropout=getattr(hcfg, "judge_segment_dropout", 0.0))
    if kind == "probe":
        groups = [{"params": list(head.parameters()), "lr": hcfg.lr}]
    else:
        named = list(head.named_parameters())
        groups = [{"params": [p for n, p in named if n.startswith(Judge.SKIP_PREFIX)], "lr": hcfg.lr},
                  {"params": [p for n, p in named if not n.startswith(Judge.SKIP_PREFIX)], "lr": hcfg.judge_lr}]
    opt = torch.optim.AdamW(groups, weight_decay=hcfg.weight_decay)
    y = torch.as_tensor(targets, dtype=torch.float32)
    rng = np.random.default_rng(seed)
    best = (float("inf"), 0, copy.deepcopy(head.state_dict()))
    history = []
    epoch = 0
    train_pairs, val_pairs = pairs if pairs is not None else (np.zeros((0, 2), np.int64),) * 2
    pair_weight, statistics_weight = getattr(hcfg, "pair_weight", 0.0), getattr(hcfg, "statistics_pair_weight", 0.0)
    use_pairs = bool(pair_weight or statistics_weight) and len(train_pairs) > 0
    for epoch in range(1, hcfg.max_epochs + 1):
        head.train()
        total = 0.0
        for b in _batches(train_idx, hcfg.batch_size, rng):
            loss = nn.functional.mse_loss(_forward(head, kind, feats, b), y[torch.as_tensor(b)])
            if use_pairs:
                drawn = train_pairs[rng.integers(0, len(train_pairs), max(1, len(b) // 2))]
                if pair_weight:
                    loss = loss + pair_weight * _pair_loss(head, kind, feats, drawn, hcfg.pair_margin,
                                                           getattr(hcfg, "judge_correction_pair_weight", 0.0))
                if statistics_weight:
                    loss = loss + statistics_weight * _statistics_pair_loss(head, kind, feats, drawn, hcfg.pair_margin)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        val = _objective(head, kind, feats, targets, val_idx, val_pairs if use_pairs else val_pairs[:0], hcfg)
        history.append({"epoch": epoch, "train_loss": total / max(1, len(train_idx)), "val_loss": val})
        if progress is not None:
            progress.update(1)
            progress.set_postfix(head=kind, epoch=epoch, val=f"{val:.4f}")
        if val < best[0] - 1e-6:
            best = (val, epoch, copy.deepcopy(head.state_dict()))
        elif epoch - best[1] >= hcfg.patience:
            break
    if progress is not None:  # early stopping skips the rest of this head's epoch budget
        progress.update(hcfg.max_epochs - epoch)
    head.load_state_dict(best[2])
    head.eval()
    return TrainResult(head, best[1], epoch, best[0], history)
