"""Hidden states are cached on disk so head training never reruns the backbone."""

from __future__ import annotations

import numpy as np
import torch

from services.scorer.features import cached_extract, extract, pad_seqs, texts_digest
from services.scorer.heads import Judge, masked_mean
from services.scorer.train import split_indices, train_head
from services.scorer.windows import DOC_STATS, WindowReader, document_batches


def test_feature_cache_computes_once_and_recomputes_when_meta_or_a_text_changes(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"pooled": torch.ones(2, 3), "seqs": [torch.ones(4, 3), torch.ones(2, 3)]}

    meta = {"backbone": "minilm", "probe_layer": 5, "judge_layer": 6, "max_tokens": 64}
    texts = ["first text", "second text"]
    a = cached_extract(tmp_path / "f.pt", meta, ["x", "y"], texts, compute)
    b = cached_extract(tmp_path / "f.pt", meta, ["x", "y"], texts, compute)
    assert len(calls) == 1 and not a["cached"] and b["cached"]
    cached_extract(tmp_path / "f.pt", {**meta, "max_tokens": 128}, ["x", "y"], texts, compute)
    assert len(calls) == 2
    # same ids, a copy degraded differently: stale features would train the heads on the old text
    c = cached_extract(tmp_path / "f.pt", {**meta, "max_tokens": 128}, ["x", "y"], ["first text", "second txet"], compute)
    assert len(calls) == 3 and not c["cached"]
    assert texts_digest(["ab", "c"]) != texts_digest(["a", "bc"])


def test_document_batches_group_similar_lengths_and_cover_every_index():
    texts = ["a" * n for n in (50, 1, 30, 2, 40, 3)]
    batches = document_batches(texts, 4, 2)  # 4 windows per call, 2 per document: 2 documents each
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert batches[0] == [1, 3] and batches[-1] == [4, 0]


def test_extract_matches_batch_of_one_and_reads_every_window(minilm):
    long = " ".join(f"Sentence {i} about a long topic." for i in range(40))
    texts = ["A short sentence.", "A somewhat longer sentence that needs more tokens than the first.", long]
    reader = WindowReader(minilm.tokenizer, 32, 128)
    feats = extract(minilm, reader, texts, ["web"] * 3, 2, 3, micro_batch=8)
    single = extract(minilm, reader, texts[:1], ["web"], 2, 3, micro_batch=1)
    torch.testing.assert_close(feats["pooled"][0], single["pooled"][0], rtol=1e-4, atol=1e-4)
    assert feats["seqs"][0].shape[0] < feats["seqs"][1].shape[0]  # padding is not stored
    assert feats["seqs"][2].shape[0] == 4 * 32 and feats["coverage"][2] < 1.0  # 4 windows of the 128 budget
    assert feats["coverage"][0] == 1.0
    for seq, probe_seq in zip(feats["seqs"], feats["probe_seqs"], strict=True):  # the Judge reads both layers
        assert seq.shape == probe_seq.shape and not torch.equal(seq, probe_seq)
    assert feats["doc_stats"].shape == (3, DOC_STATS) and [len(r) for r in feats["repeated"]] == [
        len(s) for s in feats["seqs"]]
    first = extract(minilm, WindowReader(minilm.tokenizer, 32, 128, probe_windows=1), texts, ["web"] * 3, 2, 3)
    torch.testing.assert_close(first["pooled"][2], first["probe_seqs"][2][:32].float().mean(0), rtol=2e-3, atol=2e-3)
    assert not torch.allclose(first["pooled"][2], feats["pooled"][2])  # the Probe read its first window only
    torch.testing.assert_close(first["pooled"][:2], feats["pooled"][:2])  # one-window documents: the same


def test_judge_starts_as_a_linear_probe_on_the_probe_layer():
    """The encoder path's output layer is zero-initialised: before training the Judge is its skip path."""
    torch.manual_seed(0)
    judge = Judge(8, 3, dim=16, layers=2, heads=2).eval()
    x, m = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    xp, _ = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
    b, rep, stats = torch.zeros(m.shape, dtype=torch.long), torch.zeros(m.shape), torch.ones(2, DOC_STATS)
    torch.testing.assert_close(judge(x, m, xp, b, rep, stats), judge.skip(torch.cat([masked_mean(xp, m), stats], 1)))


def test_judge_readout_is_the_mean_alone_with_no_attention_pools_and_both_forms_run():
    torch.manual_seed(0)
    x, m = pad_seqs([torch.randn(6, 8), torch.randn(6, 8)])
    x[1, 5] += 50.0  # one segment differs a lot
    xp, b, rep, stats = x.clone(), torch.zeros(m.shape, dtype=torch.long), torch.zeros(m.shape), torch.zeros(2, DOC_STATS)
    mean_only, pooled = (Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, readout_queries=q).eval() for q in (0, 4))
    assert mean_only.queries is None and mean_only.out.in_features == 16 and pooled.out.in_features == 16 * 5
    for judge in (mean_only, pooled):
        torch.nn.init.normal_(judge.out.weight)
        out = judge(x, m, xp, b, rep, stats)
        assert out.shape == (2, 2) and torch.isfinite(out).all()


def test_segment_dropout_hides_segments_in_training_only_and_never_a_whole_document():
    torch.manual_seed(0)
    judge = Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, segment_dropout=0.9)
    torch.nn.init.normal_(judge.out.weight)
    x, m = pad_seqs([torch.randn(1, 8), torch.randn(12, 8)])  # a one-segment document and a long one
    xp, b, rep, stats = x.clone(), torch.zeros(m.shape, dtype=torch.long), torch.zeros(m.shape), torch.zeros(2, DOC_STATS)
    judge.eval()
    scored = judge(x, m, xp, b, rep, stats)
    torch.testing.assert_close(judge(x, m, xp, b, rep, stats), scored)  # scoring: every segment, every time
    judge.train()
    trained = torch.stack([judge(x, m, xp, b, rep, stats) for _ in range(20)])
    assert torch.isfinite(trained).all()  # a document never loses all its segments
    torch.testing.assert_close(trained[:, 0], scored[0].expand(20, 2))  # its only segment always stays
    assert (trained[:, 1] - scored[1]).abs().amax() > 1e-3  # the long one is read through different subsets


def test_judge_masks_padding_and_early_stopping_restores_best_epoch():
    torch.manual_seed(0)
    for pool in (1, 2):
        judge = Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, pool=pool).eval()
        torch.nn.init.normal_(judge.out.weight)  # zero at init (the Judge starts as its skip): wake the encoder
        x, m = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
        xp, _ = pad_seqs([torch.randn(3, 8), torch.randn(5, 8)])
        b, rep, st = torch.zeros(m.shape, dtype=torch.long), torch.zeros(m.shape), torch.ones(2, DOC_STATS)
        x2, xp2, rep2 = x.clone(), xp.clone(), rep.clone()
        x2[0, 3:] = 99.0  # garbage in the padding of either layer must not change the output
        xp2[0, 3:] = -99.0
        rep2[0, 3:] = 1.0
        torch.testing.assert_close(judge(x, m, xp, b, rep, st), judge(x2, m, xp2, b, rep2, st))
        assert not torch.allclose(judge(x, m, xp, b, rep, st), judge(x + 1.0, m, xp, b, rep, st))  # layer L_judge matters
        b_end = b.clone()
        b_end[:, 2] = 8
        assert not torch.allclose(judge(x, m, xp, b, rep, st), judge(x, m, xp, b_end, rep, st))  # positions matter
        rep_mid = rep.clone()
        rep_mid[:, 1:3] = 1.0
        assert not torch.allclose(judge(x, m, xp, b, rep, st), judge(x, m, xp, b, rep_mid, st))  # repeats matter

    rng = np.random.default_rng(0)
    pooled = torch.as_tensor(rng.normal(size=(60, 8)), dtype=torch.float32)
    y = (pooled[:, :2].numpy() * 0.1 + 0.5 + rng.normal(scale=0.05, size=(60, 2))).astype(np.float32)
    split = split_indices(60, 0.2, 0.2, 0)
    grouped = split_indices(60, 0.2, 0.2, 0, groups=[f"g{i // 3}" for i in range(60)])  # a source + 2 copies
    for name in ("train", "val", "test"):
        assert {i // 3 for i in grouped[name]}.isdisjoint({i // 3 for k, v in grouped.items() if k != name for i in v})

    class H:
        seed, lr, judge_lr, weight_decay, batch_size, max_epochs, patience = 0, 1e-2, 1e-3, 0.0, 16, 200, 3
        judge_dim, judge_layers, judge_heads = 16, 1, 2

    class Bar:  # the stage's epoch bar: one step an epoch, the rest of the budget when stopped early
        n = 0

        def update(self, k):
            self.n += k

        def set_postfix(self, **_):
            pass

    bar = Bar()
    res = train_head("probe", {"pooled": pooled, "doc_stats": torch.ones(60, DOC_STATS)}, y, split["train"], split["val"],
                     H, 8, bar)
    assert res.epochs_run < 200 and res.epochs_run - res.best_epoch == 3
    assert bar.n == H.max_epochs
    assert res.best_val_loss == min(h["val_loss"] for h in res.history)


def test_training_inputs_pooled_once_give_the_judge_what_scoring_gives_it():
    """Training feeds the Judge segments pooled once per document; scoring pools each batch: same output."""
    from services.scorer.train import _forward

    torch.manual_seed(0)
    judge = Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, pool=4).eval()
    torch.nn.init.normal_(judge.out.weight)
    seqs = [torch.randn(7, 8), torch.randn(13, 8)]
    probe_seqs = [torch.randn(7, 8), torch.randn(13, 8)]
    buckets = [torch.tensor([0] * 6 + [8], dtype=torch.uint8), torch.tensor([1] * 12 + [8], dtype=torch.uint8)]
    repeated = [torch.tensor([0] * 5 + [1, 1], dtype=torch.uint8), torch.tensor([0] * 13, dtype=torch.uint8)]
    stats = torch.tensor([[0.5, 2 / 7, 1.0, 0.4, 1.0], [0.7, 0.0, 0.0, -0.2, 0.0]])  # length, repeated, unfinished, cohesion, heading
    feats = {"seqs": [s.half() for s in seqs], "probe_seqs": [s.half() for s in probe_seqs], "buckets": buckets,
             "repeated": repeated, "pooled": torch.zeros(2, 8),  # the Probe's input: not what the Judge reads
             "doc_stats": stats}
    x, m = pad_seqs([s.half() for s in seqs])
    xp, _ = pad_seqs([s.half() for s in probe_seqs])
    b, _ = pad_seqs(buckets)
    rep, _ = pad_seqs([r.float() for r in repeated])
    with torch.no_grad():
        torch.testing.assert_close(_forward(judge, "judge", feats, np.array([0, 1])), judge(x, m, xp, b, rep, stats),
                                   rtol=2e-3, atol=2e-3)


def test_pair_hinge_teaches_the_probe_a_difference_the_tied_labels_do_not():
    """Source and copy share their (rounded) label; only the pair term says which is better."""
    from services.scorer.train import predict, source_pairs

    rng = np.random.default_rng(1)
    n = 120
    base = rng.normal(size=(n, 8))
    defect = np.zeros(8)
    defect[3] = 1.0
    pooled = torch.as_tensor(np.concatenate([base, base + defect]), dtype=torch.float32)
    y = np.repeat(rng.uniform(0.3, 0.7, size=(n, 1)), 2, axis=1).astype(np.float32)
    y = np.concatenate([y, y])
    groups = [f"d{i}" for i in range(n)] * 2
    degradation = [""] * n + ["spam"] * n
    feats = {"pooled": pooled, "doc_stats": torch.ones(2 * n, DOC_STATS)}
    train = np.array([i for i in range(2 * n) if i % n < 90])
    test = np.array([i for i in range(2 * n) if i % n >= 90])
    pairs = (source_pairs(groups, degradation, train), source_pairs(groups, degradation, test))
    assert len(pairs[0]) == 90 and all(groups[a] == groups[b] for a, b in pairs[0])

    def accuracy(weight: float) -> float:
        class H:
            seed, lr, judge_lr, weight_decay, batch_size, max_epochs, patience = 0, 1e-2, 1e-3, 0.0, 16, 60, 60
            pair_weight, pair_margin = weight, 0.05

        head = train_head("probe", feats, y, train, test, H, 8, pairs=pairs).head
        q = predict(head, "probe", feats, pairs[1].reshape(-1)).mean(1).reshape(-1, 2)
        return float(np.mean(q[:, 0] > q[:, 1]))

    assert accuracy(1.0) >= 0.95 > accuracy(0.0) + 0.2


def test_correction_hinge_adds_its_weight_times_the_reversed_corrections_and_nothing_at_weight_0():
    """The second pair hinge reads the Judge's encoder correction alone (output minus skip path)."""
    from services.scorer.train import _forward, _pair_loss

    torch.manual_seed(0)
    judge = Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, pool=1).eval()
    torch.nn.init.normal_(judge.out.weight)
    n = 6
    feats = {"seqs": [torch.randn(5, 8).half() for _ in range(n)], "probe_seqs": [torch.randn(5, 8).half() for _ in range(n)],
             "buckets": [torch.tensor([0, 1, 2, 3, 8], dtype=torch.uint8)] * n,
             "repeated": [torch.zeros(5, dtype=torch.uint8)] * n, "pooled": torch.zeros(n, 8),
             "doc_stats": torch.randn(n, DOC_STATS)}
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    rows = pairs.reshape(-1)
    with torch.no_grad():
        skip, correction = _forward(judge, "judge", feats, rows, parts=True)
        torch.testing.assert_close(skip + correction, _forward(judge, "judge", feats, rows))
        c = correction.mean(1).view(-1, 2)
        reversed_part = torch.relu(c[:, 1] - c[:, 0]).mean()
        assert reversed_part > 0  # random weights reverse at least one of the three pairs
        base = _pair_loss(judge, "judge", feats, pairs, 0.02)
        torch.testing.assert_close(_pair_loss(judge, "judge", feats, pairs, 0.02, 0.0), base)
        torch.testing.assert_close(_pair_loss(judge, "judge", feats, pairs, 0.02, 5.0), base + 5.0 * reversed_part)
        # the Probe has no correction: the weight does not apply to it
        probe_feats = {"pooled": torch.randn(n, 8), "doc_stats": torch.randn(n, DOC_STATS)}
        from services.scorer.heads import Probe

        probe = Probe(8, 2).eval()
        torch.testing.assert_close(_pair_loss(probe, "probe", probe_feats, pairs, 0.02, 5.0),
                                   _pair_loss(probe, "probe", probe_feats, pairs, 0.02))


def test_statistics_hinge_reads_each_source_with_its_copys_statistics_and_trains_only_their_weights():
    """The source's own input against the same input with the copy's repeated fraction, unfinished
    end, cohesion and heading: log length stays the source's, pairs whose statistics agree add nothing, and
    only the statistics' weights get a gradient (the Judge's encoder is not run)."""
    from services.scorer.heads import Probe
    from services.scorer.train import _statistics_pair_loss

    torch.manual_seed(0)
    n = 6
    stats = torch.zeros(n, DOC_STATS)
    stats[0] = torch.tensor([0.5, 0.0, 0.0, 0.8, 1.0])
    stats[1] = torch.tensor([0.5, 0.0, 0.0, 0.1, 0.0])  # a shuffled copy: cohesion fell, heading moved
    stats[2] = torch.tensor([0.5, 0.0, 0.0, 0.3, 0.0])
    stats[3] = torch.tensor([0.9, 0.0, 0.0, 0.3, 0.0])  # only the length differs: not a pair of this term
    stats[4] = torch.tensor([0.6, 0.0, 0.0, 0.2, 1.0])
    stats[5] = torch.tensor([0.4, 0.0, 1.0, 0.2, 1.0])  # a cut copy: shorter and unfinished
    feats = {"pooled": torch.randn(n, 8), "doc_stats": stats,
             "seqs": [torch.randn(5, 8).half() for _ in range(n)], "probe_seqs": [torch.randn(5, 8).half() for _ in range(n)],
             "buckets": [torch.tensor([0, 1, 2, 3, 8], dtype=torch.uint8)] * n,
             "repeated": [torch.zeros(5, dtype=torch.uint8)] * n}
    pairs = np.array([[0, 1], [2, 3], [4, 5]])
    probe, judge = Probe(8, 2), Judge(8, 2, dim=16, layers=1, heads=2, dropout=0.0, pool=1)
    with torch.no_grad():  # small statistics' weights: every pair's hinge is active
        probe.out.weight[:, 8:] *= 0.01
        judge.skip.weight[:, 8:] *= 0.01
    w = probe.out.weight.detach()[:, 8:]

    def by_hand(w_stats, src, copy):
        virtual = torch.cat([stats[src, :1], stats[copy, 1:]])
        return torch.relu(0.05 - (w_stats @ (stats[src] - virtual)).mean())

    loss = _statistics_pair_loss(probe, "probe", feats, pairs, 0.05)
    torch.testing.assert_close(loss, (by_hand(w, 0, 1) + by_hand(w, 4, 5)) / 2)
    loss.backward()
    grad = probe.out.weight.grad
    assert not grad[:, :9].any() and grad[:, 9:].abs().sum() > 0  # pooled states and log length: no gradient
    assert _statistics_pair_loss(probe, "probe", feats, np.array([[2, 3]]), 0.05) == 0

    loss = _statistics_pair_loss(judge, "judge", feats, pairs, 0.05)
    torch.testing.assert_close(loss, (by_hand(judge.skip.weight.detach()[:, 8:], 0, 1)
                                      + by_hand(judge.skip.weight.detach()[:, 8:], 4, 5)) / 2)
    loss.backward()
    assert not judge.skip.weight.grad[:, :9].any() and judge.skip.weight.grad[:, 9:].abs().sum() > 0
    assert all(p.grad is None for name, p in judge.named_parameters() if not name.startswith("skip."))


def test_statistics_pair_weight_turns_the_statistics_hinge_on_in_training():
    """Tied labels, copies whose cohesion fell and whose states moved at random: with the weight on,
    the Probe learns to count a cohesion drop against a copy; at 0 the training is what it was."""
    from services.scorer.heads import Probe
    from services.scorer.train import source_pairs

    rng = np.random.default_rng(0)
    n = 80
    base = rng.normal(size=(n, 8))
    pooled = torch.as_tensor(np.concatenate([base, base + rng.normal(scale=0.3, size=(n, 8))]), dtype=torch.float32)
    stats = torch.zeros(2 * n, DOC_STATS)
    stats[:n, 3] = torch.as_tensor(rng.uniform(0.3, 1.0, n), dtype=torch.float32)
    y = np.repeat(rng.uniform(0.3, 0.7, size=(n, 1)), 2, axis=1).astype(np.float32)
    y = np.concatenate([y, y])
    groups, degradation = [f"d{i}" for i in range(n)] * 2, [""] * n + ["order"] * n
    feats = {"pooled": pooled, "doc_stats": stats}
    train, val = np.array([i for i in range(2 * n) if i % n < 60]), np.array([i for i in range(2 * n) if i % n >= 60])
    pairs = (source_pairs(groups, degradation, train), source_pairs(groups, degradation, val))

    def cohesion_weight(statistics_pair_weight: float) -> float:
        class H:
            seed, lr, judge_lr, weight_decay, batch_size, max_epochs, patience = 0, 1e-2, 1e-3, 0.0, 16, 30, 30
            pair_weight, pair_margin = 0.0, 0.05

        H.statistics_pair_weight = statistics_pair_weight
        head = train_head("probe", feats, y, train, val, H, 8, pairs=pairs).head
        assert isinstance(head, Probe)
        return float(head.out.weight.detach()[:, 8 + 3].mean())

    assert cohesion_weight(1.0) > cohesion_weight(0.0) + 0.05
