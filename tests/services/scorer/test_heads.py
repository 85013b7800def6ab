"""Head ensembles: the mean of their members, through every entry point training and scoring use."""

from __future__ import annotations

import numpy as np
import torch

from services.scorer.heads import HeadEnsemble, Judge, Probe
from services.scorer.train import predict, train_head
from services.scorer.windows import DOC_STATS


def _judge_inputs(n: int = 3, t: int = 5, width: int = 8):
    torch.manual_seed(1)
    return (torch.randn(n, t, width), torch.ones(n, t, dtype=torch.bool), torch.randn(n, t, width),
            torch.randint(0, 9, (n, t)), torch.rand(n, t), torch.randn(n, width + DOC_STATS))


def test_ensemble_reads_as_the_mean_of_its_members_in_every_form():
    torch.manual_seed(0)
    judges = [Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, pool=2).eval() for _ in range(3)]
    for j in judges:
        torch.nn.init.normal_(j.out.weight)  # a non-zero correction, so the encoder path counts too
    ens = HeadEnsemble(judges).eval()
    assert ens.pool == 2
    args = _judge_inputs()
    with torch.no_grad():
        torch.testing.assert_close(ens.forward_segments(*args), torch.stack([j.forward_segments(*args) for j in judges]).mean(0))
        skip, corr = ens.forward_parts(*args)
        parts = [j.forward_parts(*args) for j in judges]
        torch.testing.assert_close(skip, torch.stack([p[0] for p in parts]).mean(0))
        torch.testing.assert_close(corr, torch.stack([p[1] for p in parts]).mean(0))
        x, m, xp, b, rep, skip_in = args
        stats = skip_in[:, 8:]
        torch.testing.assert_close(ens(x, m, xp, b, rep, stats), torch.stack([j(x, m, xp, b, rep, stats) for j in judges]).mean(0))
    probes = [Probe(8, 2) for _ in range(2)]
    pooled, stats = torch.randn(4, 8), torch.randn(4, DOC_STATS)
    torch.testing.assert_close(HeadEnsemble(probes).forward_pooled(pooled, stats),
                               (probes[0].forward_pooled(pooled, stats) + probes[1].forward_pooled(pooled, stats)) / 2)


def test_ensemble_members_differ_by_seed_and_member_0_is_the_single_head():
    rng = np.random.default_rng(0)
    pooled = torch.as_tensor(rng.normal(size=(80, 8)), dtype=torch.float32)
    y = (1 / (1 + np.exp(-pooled[:, :2].numpy()))).astype(np.float32)
    feats = {"pooled": pooled, "doc_stats": torch.zeros(80, DOC_STATS)}

    class H:
        seed, lr, judge_lr, weight_decay, batch_size, max_epochs, patience = 3, 1e-2, 1e-3, 0.0, 16, 5, 5

    single = train_head("probe", feats, y, np.arange(60), np.arange(60, 80), H, 8).head
    first = train_head("probe", feats, y, np.arange(60), np.arange(60, 80), H, 8, member=0).head
    second = train_head("probe", feats, y, np.arange(60), np.arange(60, 80), H, 8, member=1).head
    torch.testing.assert_close(single.out.weight, first.out.weight)
    assert not torch.allclose(first.out.weight, second.out.weight)
    rows = np.arange(60, 80)
    mean = (predict(first, "probe", feats, rows) + predict(second, "probe", feats, rows)) / 2
    np.testing.assert_allclose(predict(HeadEnsemble([first, second]), "probe", feats, rows), mean, rtol=1e-6)
