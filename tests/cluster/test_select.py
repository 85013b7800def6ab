"""The held-out split keeps each source's share of the bytes, whatever its documents' lengths."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.select import held_out_positions, select_kept


def _source(n_docs: int, length: int, prefix: str, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    return [f"{prefix}-{i}" for i in range(n_docs)], [rng.randint(length // 2, 3 * length // 2) for _ in range(n_docs)]


@pytest.mark.parametrize("n_docs,length", [(150, 20_000), (700, 800), (40, 5_000)])
def test_held_out_bytes_are_the_fraction_of_the_source(n_docs: int, length: int) -> None:
    ids, sizes = _source(n_docs, length, "doc", seed=n_docs)
    held = held_out_positions(ids, sizes, 0.05)
    share = sum(sizes[i] for i in held) / sum(sizes)
    # one document is the granularity: within half the largest document of the target
    assert abs(share - 0.05) <= max(sizes) / 2 / sum(sizes)
    assert 0 < len(held) < n_docs


def test_long_and_short_sources_get_the_same_share() -> None:
    """The failure this rule replaces: a per-document draw gives a source of few long documents
    another share of the split than it has of the corpus."""
    long_ids, long_sizes = _source(150, 30_000, "wiki", seed=1)
    short_ids, short_sizes = _source(700, 700, "go", seed=2)
    shares = []
    for ids, sizes in ((long_ids, long_sizes), (short_ids, short_sizes)):
        held = held_out_positions(ids, sizes, 0.04)
        shares.append(sum(sizes[i] for i in held) / sum(sizes))
    assert shares[0] == pytest.approx(0.04, abs=0.01) and shares[1] == pytest.approx(0.04, abs=0.002)


def test_split_is_a_hash_order_prefix_independent_of_input_order() -> None:
    ids, sizes = _source(300, 2_000, "d", seed=3)
    small = {ids[i] for i in held_out_positions(ids, sizes, 0.02)}
    large = {ids[i] for i in held_out_positions(ids, sizes, 0.10)}
    assert small and small < large
    order = list(range(len(ids)))
    random.Random(4).shuffle(order)
    shuffled = [ids[i] for i in order], [sizes[i] for i in order]
    assert {shuffled[0][i] for i in held_out_positions(*shuffled, 0.10)} == large


def test_edge_fractions_and_bad_input() -> None:
    ids, sizes = _source(20, 1_000, "d", seed=5)
    assert held_out_positions(ids, sizes, 0.0) == set()
    assert held_out_positions(["only"], [10_000], 0.02) == set()  # the one document would be the whole source
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        held_out_positions(ids, sizes, 1.0)
    with pytest.raises(ValueError, match="20 ids but 19 sizes"):
        held_out_positions(ids, sizes[:-1], 0.1)


def test_select_kept_splits_by_bytes_per_source_and_drops_a_stale_split(tmp_path) -> None:
    rng = random.Random(6)
    rows = [{"id": f"wiki-{i}", "text": "w" * rng.randint(10_000, 40_000), "source": "wiki", "keep": True}
            for i in range(120)]
    rows += [{"id": f"go-{i}", "text": "g" * rng.randint(300, 900), "source": "go", "keep": i % 10 != 0}
             for i in range(600)]
    rows += [{"id": "tiny-0", "text": "t" * 50, "source": "tiny", "keep": True}]
    scores = tmp_path / "scores"
    scores.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), scores / "part-0.parquet")
    (scores / "manifest.json").write_text(json.dumps({"shards": ["part-0.parquet"]}))
    out = tmp_path / "kept"
    (out / "eval").mkdir(parents=True)
    (out / "eval" / "tiny.parquet").write_bytes(b"left by an earlier run")

    report = select_kept(scores, out, 0.05)

    assert report["scored"] == 721 and report["kept"] == 661
    for source in ("wiki", "go"):
        train = pq.read_table(out / "train" / f"{source}.parquet").to_pylist()
        evals = pq.read_table(out / "eval" / f"{source}.parquet").to_pylist()
        held = sum(len(r["text"]) for r in evals)
        share = held / (held + sum(len(r["text"]) for r in train))
        assert share == pytest.approx(0.05, abs=0.01)
        assert report["sources"][source]["eval_byte_share"] == round(share, 4)
        assert not {r["id"] for r in train} & {r["id"] for r in evals}
    assert report["sources"]["go"]["train"] + report["sources"]["go"]["eval"] == 540
    assert report["sources"]["tiny"] == {"train": 1, "eval": 0, "eval_byte_share": 0.0}
    assert not (out / "eval" / "tiny.parquet").exists()
