"""Hidden states are cached on disk so head training never reruns the backbone."""

from __future__ import annotations

import numpy as np
import torch

from services.scorer.features import cached_extract, extract, length_buckets, pad_seqs
from services.scorer.heads import Judge, masked_mean
from services.scorer.train import split_indices, train_head


def test_feature_cache_computes_once_and_recomputes_when_meta_changes(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"pooled": torch.ones(2, 3), "seqs": [torch.ones(4, 3), torch.ones(2, 3)]}

    meta = {"backbone": "minilm", "probe_layer": 5, "judge_layer": 6, "max_tokens": 64}
    a = cached_extract(tmp_path / "f.pt", meta, ["x", "y"], compute)
    b = cached_extract(tmp_path / "f.pt", meta, ["x", "y"], compute)
    assert len(calls) == 1 and not a["cached"] and b["cached"]
    cached_extract(tmp_path / "f.pt", {**meta, "max_tokens": 128}, ["x", "y"], compute)
    assert len(calls) == 2


def test_length_buckets_group_similar_lengths_and_cover_every_index():
    texts = ["a" * n for n in (50, 1, 30, 2, 40, 3)]
    buckets = length_buckets(texts, 2)
    assert sorted(i for b in buckets for i in b) == list(range(6))
    assert buckets[0] == [1, 3] and buckets[-1] == [4, 0]


def test_extract_matches_batch_of_one(minilm):
    texts = ["A short sentence.", "A somewhat longer sentence that needs more tokens than the first."]
    feats = extract(minilm, texts, 2, 3, 32, micro_batch=2)
    single = extract(minilm, texts[:1], 2, 3, 32, micro_batch=1)
    torch.testing.assert_close(feats["pooled"][0], single["pooled"][0], rtol=1e-4, atol=1e-4)
    assert feats["seqs"][0].shape[0] < feats["seqs"][1].shape[0]  # padding is not stored
    for seq, probe_seq in zip(feats["seqs"], feats["probe_seqs"], strict=True):  # the Judge reads both layers
        assert seq.shape == probe_seq.shape and not torch.equal(seq, probe_seq)


def test_judge_starts_as_a_linear_probe_on_the_probe_layer():
    """The encoder path's output layer is zero-initialised: before training the Judge is its skip path."""
    torch.manual_seed(0)
    judge = Judge(8, 3, dim=16, layers=2, heads=2).eval()
    x, m = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    xp, _ = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    torch.testing.assert_close(judge(x, m, xp), judge.skip(masked_mean(xp, m)))


def test_judge_masks_padding_and_early_stopping_restores_best_epoch():
    torch.manual_seed(0)
    judge = Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0).eval()
    torch.nn.init.normal_(judge.out.weight)  # zero at init (the Judge starts as its skip): wake the encoder path
    x, m = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    xp, _ = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    x2, xp2 = x.clone(), xp.clone()
    x2[0, 3:] = 99.0  # garbage in the padding of either layer must not change the output
    xp2[0, 3:] = -99.0
    torch.testing.assert_close(judge(x, m, xp), judge(x2, m, xp2))
    assert not torch.allclose(judge(x, m, xp), judge(x + 1.0, m, xp))  # the layer-L_judge sequence matters

    rng = np.random.default_rng(0)
    pooled = torch.as_tensor(rng.normal(size=(60, 8)), dtype=torch.float32)
    y = (pooled[:, :2].numpy() * 0.1 + 0.5).astype(np.float32)
    split = split_indices(60, 0.2, 0.2, 0)

    class H:
        seed, lr, judge_lr, weight_decay, batch_size, max_epochs, patience = 0, 1e-2, 1e-3, 0.0, 16, 200, 3
        judge_dim, judge_layers, judge_heads = 16, 1, 2

    res = train_head("probe", {"pooled": pooled}, y, split["train"], split["val"], H, 8)
    assert res.epochs_run < 200 and res.epochs_run - res.best_epoch == 3
    assert res.best_val_loss == min(h["val_loss"] for h in res.history)
