"""Mixtures: deterministic, resumable, exact packing, explicit epochs, rank slicing."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from shared.data.loader import MixtureLoader
from shared.data.mixture import Mixture, simulate
from shared.data.shards import ShardError

RATES = {"web": 0.5, "code": 0.3, "intl": 0.2}
SEQ = 32


def _mixture(root, seed=0, rates=RATES, on_exhausted="repeat", seq_len=SEQ):
    return Mixture.from_shards(root, rates, seq_len, seed=seed, on_exhausted=on_exhausted)


def _take(loader, n):
    return [next(loader) for _ in range(n)]


def _same(a, b):
    return all(
        torch.equal(x.inputs_BT, y.inputs_BT) and torch.equal(x.targets_BT, y.targets_BT) and x.sources_B == y.sources_B
        for x, y in zip(a, b, strict=True)
    )


def test_same_seed_gives_identical_batches_and_another_seed_does_not(shards_root):
    a = _take(MixtureLoader(_mixture(shards_root, seed=3), 4), 20)
    b = _take(MixtureLoader(_mixture(shards_root, seed=3), 4), 20)
    c = _take(MixtureLoader(_mixture(shards_root, seed=4), 4), 20)
    assert _same(a, b)
    assert not _same(a, c)


def test_targets_are_inputs_shifted_by_one(shards_root):
    batch = next(MixtureLoader(_mixture(shards_root), 4))
    assert batch.inputs_BT.shape == batch.targets_BT.shape == (4, SEQ)
    assert batch.inputs_BT.dtype == torch.int64
    assert torch.equal(batch.inputs_BT[:, 1:], batch.targets_BT[:, :-1])


@pytest.mark.parametrize("s", [1, 7, 23])
def test_resume_from_state_at_step_s_matches_the_uninterrupted_run(shards_root, s):
    full = _take(MixtureLoader(_mixture(shards_root, seed=1), 3), 30)
    first = MixtureLoader(_mixture(shards_root, seed=1), 3)
    _take(first, s)
    state = first.state_dict()
    assert set(state) == {"step", "counts", "global_batch", "seq_len"} and state["step"] == s

    resumed = MixtureLoader(_mixture(shards_root, seed=1), 3)  # a fresh process: new objects
    resumed.load_state_dict(state)
    assert _same(_take(resumed, 30 - s), full[s:])

    from_step = MixtureLoader(_mixture(shards_root, seed=1), 3)  # only a step counter
    from_step.load_state_dict({"step": s})
    assert _same(_take(from_step, 30 - s), full[s:])


def test_resume_rejects_a_state_from_another_setup(shards_root):
    loader = MixtureLoader(_mixture(shards_root), 4)
    _take(loader, 2)
    with pytest.raises(ValueError, match="global_batch"):
        MixtureLoader(_mixture(shards_root), 8).load_state_dict(loader.state_dict())


def test_ranks_split_the_global_stream_every_world_size_th(shards_root):
    one = _take(MixtureLoader(_mixture(shards_root), 6), 5)
    ranks = [_take(MixtureLoader(_mixture(shards_root), 2, rank=r, world_size=3), 5) for r in range(3)]
    for step in range(5):
        for r in range(3):
            assert torch.equal(ranks[r][step].inputs_BT, one[step].inputs_BT[r::3])
    states = [MixtureLoader(_mixture(shards_root), 2, rank=r, world_size=3) for r in range(3)]
    for loader in states:
        _take(loader, 2)
    assert states[0].state_dict() == states[1].state_dict() == states[2].state_dict()


def test_packing_covers_every_document_once_per_epoch_with_separators(shards_root, tokenizer, texts):
    mix = _mixture(shards_root, rates={"intl": 1.0}, seq_len=16)
    src = mix.sources[0]
    loader = MixtureLoader(mix, 1, doc_boundaries=True)
    n = mix.capacities[0] + 1  # the last window crosses into the second epoch
    rows = [next(loader) for _ in range(n)]
    stream = np.concatenate([b.inputs_BT[0].numpy() for b in rows] + [rows[-1].targets_BT[0, -1:].numpy()])
    epoch = stream[: src.epoch_tokens]
    assert epoch[-1] == mix.eos_id
    pieces = np.split(epoch[:-1], np.flatnonzero(epoch[:-1] == mix.eos_id))
    docs = [tokenizer.decode(p[1:] if i else p) for i, p in enumerate(pieces)]
    assert sorted(docs) == sorted(t for t in texts["intl"] if t)
    # document ids restart per row and step up right after each separator
    for b in rows:
        x, ids = b.inputs_BT[0], b.doc_ids_BT[0]
        assert ids[0] == 0
        assert torch.equal(ids[1:] - ids[:-1], (x[:-1] == mix.eos_id).to(ids.dtype))


def test_small_source_repeats_with_a_new_shuffle_and_says_so(shards_root, caplog):
    mix = _mixture(shards_root, rates={"web": 0.8, "intl": 0.2}, seq_len=16)
    intl = mix.names.index("intl")
    cap = mix.capacities[intl]
    n_seq = int(2.6 * cap / 0.2)
    with caplog.at_level(logging.INFO, logger="shared.data.mixture"):
        stats = simulate(mix, n_seq * 16)
    assert stats["stopped"] is None
    assert 2.5 < stats["sources"]["intl"]["epochs"] < 2.7
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "'intl'" in r.getMessage()]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO]
    assert "epoch 2" in said[0][1] and "epoch 3" in said[1][1]
    src = mix.sources[intl]
    assert not np.array_equal(src._order(0)[0], src._order(1)[0])  # each epoch reshuffles
    assert np.array_equal(np.sort(src._order(1)[0]), np.arange(src.docs))


def test_stop_mode_ends_the_stream_before_a_second_epoch_and_says_why(shards_root, caplog):
    mix = _mixture(shards_root, rates={"web": 0.8, "intl": 0.2}, seq_len=16, on_exhausted="stop")
    loader = MixtureLoader(mix, 4)
    with caplog.at_level(logging.WARNING, logger="shared.data.loader"):
        batches = list(loader)
    seen = sum(b.sources_B.count("intl") for b in batches)
    cap = mix.capacities[mix.names.index("intl")]
    assert cap - 4 < seen <= cap
    assert "'intl' ran out" in loader.stopped and "on_exhausted=stop" in loader.stopped
    assert any("stopped at step" in r.getMessage() for r in caplog.records)
    stats = simulate(_mixture(shards_root, rates={"web": 0.8, "intl": 0.2}, seq_len=16, on_exhausted="stop"), 10**7)
    assert stats["sources"]["intl"]["sequences"] == cap and "'intl'" in stats["stopped"]


def test_rates_naming_a_source_without_shards_fail_clearly(shards_root):
    with pytest.raises(ShardError, match=r"\['math'\]"):
        _mixture(shards_root, rates={"web": 0.5, "math": 0.5})


def test_empty_rates_mean_a_natural_mixture(shards_root):
    mix = _mixture(shards_root, rates={})
    tokens = {s.name: s.doc_tokens for s in mix.sources}
    assert mix.rates == pytest.approx([tokens[n] / sum(tokens.values()) for n in mix.names])


def test_only_rank_0_announces_a_new_epoch(shards_root, caplog):
    def warnings_of(rank):
        caplog.clear()
        mix = _mixture(shards_root, rates={"web": 0.8, "intl": 0.2}, seq_len=16)
        loader = MixtureLoader(mix, 4, rank=rank, world_size=2)
        with caplog.at_level(logging.INFO, logger="shared.data.mixture"):
            _take(loader, mix.capacities[mix.names.index("intl")])  # 8·cap slots: 1.6 epochs of intl
        return [r for r in caplog.records if "'intl' ran out" in r.getMessage()]

    assert len(warnings_of(0)) == 1
    assert warnings_of(1) == []
