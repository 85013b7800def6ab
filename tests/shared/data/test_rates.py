"""Rate preservation: every prefix of ≥ 100 sequences within 1 percentage point of target, where an
i.i.d. sampler with the same rates is not; property-tested over random rates and source sizes."""

from __future__ import annotations

import tempfile

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.data.loader import MixtureLoader
from shared.data.mixture import Mixture
from shared.data.schedule import RateSchedule
from shared.data.shards import Shard, pack_documents, write_shard
from shared.data.source import PackedSource

EOS = 0
SEQ = 8


def worst_prefix_deviation(picks: np.ndarray, rates: np.ndarray, min_prefix: int = 100) -> float:
    """max over n ≥ min_prefix and sources of |count_i(n)/n − rate_i|."""
    onehot = np.eye(len(rates))[picks]
    n = np.arange(1, len(picks) + 1)[:, None]
    dev = np.abs(np.cumsum(onehot, axis=0) / n - rates[None, :])
    return float(dev[min_prefix - 1 :].max())


def _sources(root, sizes: list[list[int]], seed: int) -> dict[str, PackedSource]:
    rng = np.random.default_rng(seed)
    out = {}
    for j, lengths in enumerate(sizes):
        docs = [rng.integers(1, 1000, size=n).tolist() for n in lengths]
        tokens, offsets = pack_documents(docs, np.dtype(np.uint16))
        name = f"s{j}"
        info = write_shard(root, f"{name}/part", name, tokens, offsets)
        out[name] = PackedSource(name, [Shard(root, info)], EOS, seed)
    return out


mixtures = st.integers(2, 6).flatmap(
    lambda k: st.tuples(
        st.lists(st.floats(0.02, 1.0), min_size=k, max_size=k),  # raw weights → random rates
        st.lists(st.lists(st.integers(1, 40), min_size=2, max_size=30), min_size=k, max_size=k),  # doc lengths
        st.integers(1, 5),  # batch size
        st.integers(0, 2**31 - 1),  # seed
    )
)


def test_mixture_stays_within_1pp_at_every_prefix_where_iid_sampling_does_not():
    iid_worst: list[float] = []

    @settings(max_examples=50, deadline=None, derandomize=True)
    @given(mixtures)
    def check(example):
        weights, sizes, batch, seed = example
        with tempfile.TemporaryDirectory() as tmp:
            sources = _sources(tmp, sizes, seed)
            rates = {f"s{j}": w for j, w in enumerate(weights)}
            mix = Mixture(sources, rates, SEQ, on_exhausted="repeat")
            loader = MixtureLoader(mix, batch)
            picks = np.array(
                [mix.names.index(s) for _ in range(600 // batch) for s in next(loader).sources_B]
            )
            target = np.array(mix.rates)
            assert worst_prefix_deviation(picks, target) <= 0.01
            # small sources were repeated, and the report counts their epochs
            report = mix.report(loader.counts)
            for name, src in zip(mix.names, mix.sources, strict=True):
                assert report[name]["epochs"] == report[name]["sequences"] * SEQ / src.epoch_tokens
            iid = np.random.default_rng(seed).choice(len(target), size=len(picks), p=target)
            iid_worst.append(worst_prefix_deviation(iid, target))

    check()
    assert len(iid_worst) >= 30
    exceeded = sum(w > 0.01 for w in iid_worst)
    assert exceeded >= 0.9 * len(iid_worst), f"i.i.d. exceeded 1pp in only {exceeded}/{len(iid_worst)} cases"
    assert float(np.median(iid_worst)) > 0.02


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12), st.integers(1, 3000))
def test_schedule_counts_never_drift_a_whole_sequence_from_target(weights, n):
    sched = RateSchedule(weights)
    counts = [0] * len(weights)
    bound = 1 - sched.delta + 1e-9  # Tijdeman 1980: |c_i(t) − r_i t| ≤ 1 − 1/(2S − 2)
    for t in range(n):
        sched.advance(counts, t, 1)
        assert max(abs(c - r * (t + 1)) for c, r in zip(counts, sched.rates, strict=True)) <= bound
    assert sched.counts_at(n) == counts


def test_rates_hold_for_a_short_run_with_a_tiny_source():
    picks = []
    sched = RateSchedule([0.4, 0.2, 0.15, 0.15, 0.09, 0.01])
    counts = [0] * 6
    picks = np.array(sched.advance(counts, 0, 1000))
    assert worst_prefix_deviation(picks, np.array(sched.rates)) < 0.01
    assert counts == [400, 200, 150, 150, 90, 10]
