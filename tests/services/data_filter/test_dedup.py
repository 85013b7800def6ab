"""MinHash LSH near-dedup: planted near-duplicates at controlled Jaccard similarity in real text.

Each base document is 80 words of the Python reference manual (normalised as the shingler sees
it: lower case, punctuation dropped). Its planted copy keeps the first k words and replaces the
rest with words from a reserved pool of other manual text, which sets the Jaccard similarity of
the word 5-gram sets; the exact value is measured per pair and the LSH prediction
1 - (1 - s^8)^14 is averaged over the pairs of a level. Five MinHash seeds give ~200 pairs per
level. Tolerance: 4 binomial standard deviations of the level's rate plus 0.02 (the curve is
exact for ideal min-wise hashing; datasketch's 32-bit universal hashing is close to it).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from services.data_filter.dedup.lsh import band_edges, duplicates_from_edges
from services.data_filter.dedup.minhash import Signer, lsh_probability, shingles
from tests.services.data_filter import realtext

LEVELS = (0.5, 0.7, 0.8, 0.9, 1.0)
N_WORDS = 80
SEEDS = (1, 2, 3, 4, 5)


def corpus():
    tokens = re.findall(r"[^\W_]+", " ".join(realtext.manual_paragraphs()).lower())
    pool_start = int(len(tokens) * 0.8)
    base = [tokens[i : i + N_WORDS] for i in range(0, pool_start - N_WORDS, N_WORDS)]
    pool = tokens[pool_start:]
    return base, pool


def plant(base, pool):
    """(docs, planted {copy index: (base index, measured jaccard, level)})."""
    docs, planted = [], {}
    m = N_WORDS - 4
    p = 0
    for i, words in enumerate(base):
        level = LEVELS[i % len(LEVELS)]
        x = round(2 * m * level / (1 + level))  # shared shingles for Jaccard = x / (2m - x)
        k = min(x + 4, N_WORDS)
        tail = pool[p : p + N_WORDS - k]
        p = (p + N_WORDS - k) % (len(pool) - N_WORDS)
        copy = words[:k] + tail
        a, b = shingles(" ".join(words), 5), shingles(" ".join(copy), 5)
        docs.append(" ".join(words))
        docs.append(" ".join(copy))
        planted[len(docs) - 1] = (len(docs) - 2, len(a & b) / len(a | b), level)
    return docs, planted


@pytest.fixture(scope="module")
def trials():
    base, pool = corpus()
    docs, planted = plant(base, pool)
    rows = []
    false_pos = 0
    for seed in SEEDS:
        signer = Signer(5, 14, 8, seed)
        keys = signer.band_keys(docs)
        ids = np.arange(len(docs), dtype=np.uint64)
        edges = np.concatenate([band_edges(keys[:, b], ids) for b in range(14)])
        removed = duplicates_from_edges(edges)
        for copy, (orig, jac, level) in planted.items():
            rows.append((level, jac, removed.get(copy) == orig))
        false_pos += sum(1 for k in removed if k not in planted)  # a base document removed
    return rows, false_pos, len(base) * len(SEEDS)


def test_detection_rate_per_level_matches_the_lsh_curve(trials):
    rows, false_pos, n_base = trials
    report = []
    for level in LEVELS:
        sel = [(j, d) for lv, j, d in rows if lv == level]
        measured = sum(d for _, d in sel) / len(sel)
        expected = sum(lsh_probability(j, 14, 8) for j, _ in sel) / len(sel)
        tol = 4 * math.sqrt(max(expected * (1 - expected), 1e-9) / len(sel)) + 0.02
        report.append(f"s={level}: n={len(sel)} measured={measured:.3f} expected={expected:.3f} tol={tol:.3f}")
        assert abs(measured - expected) <= tol, report
    print("\n".join(report) + f"\nfalse positives: {false_pos}/{n_base} base documents = {false_pos / n_base:.4f}")


def test_planted_similarities_hit_their_levels(trials):
    rows, _, _ = trials
    for level in LEVELS:
        sims = [j for lv, j, _ in rows if lv == level]
        assert abs(np.mean(sims) - level) < 0.02


def test_exact_duplicates_are_always_removed(trials):
    rows, _, _ = trials
    exact = [d for lv, _, d in rows if lv == 1.0]
    assert exact and all(exact)


def test_unrelated_documents_are_not_removed(trials):
    _, false_pos, n_base = trials
    assert false_pos / n_base <= 0.005, f"false-positive rate {false_pos / n_base:.4f}"


def test_components_keep_the_first_document_of_a_chain():
    # 3 ~ 2 and 2 ~ 1 (but not 3 ~ 1 directly): one cluster, 1 is kept
    edges = np.array([[2, 3], [1, 2]], dtype=np.uint64)
    assert duplicates_from_edges(edges) == {2: 1, 3: 1}


def test_default_curve_threshold_is_about_0_72():
    assert (1 / 14) ** (1 / 8) == pytest.approx(0.72, abs=0.005)  # the usual threshold estimate
    assert lsh_probability(0.685, 14, 8) == pytest.approx(0.5, abs=0.01)  # where the curve crosses 1/2


def _plain_signature(signer: Signer, text: str) -> np.ndarray:
    """The signature as the definition reads, one document and one shingle set at a time: the minimum
    over the distinct word 5-gram hashes of (a h + b mod 2^64) >> 32 per permutation."""
    from services.data_filter.dedup.minhash import _M1, _M2, _word_hash

    words = re.findall(r"[^\W_]+", text.lower())
    ids = [np.uint64(_word_hash(w)) for w in words] or [np.uint64(_word_hash(text))]
    grams = [ids] if len(words) <= 5 else [ids[i: i + 5] for i in range(len(ids) - 4)]
    hashes = set()
    with np.errstate(over="ignore"):
        for gram in grams:
            h = np.uint64(len(words) if len(words) <= 5 else 5) * _M2
            for x in gram:
                h = (h ^ x) * _M1
                h ^= h >> np.uint64(29)
            hashes.add(int(h >> np.uint64(32)))
        hv = np.array(sorted(hashes), dtype=np.uint64)
        return ((hv[:, None] * signer._a[None, :] + signer._b[None, :]).min(0)) >> np.uint64(32)


def test_batched_signatures_equal_the_definition_document_by_document(monkeypatch):
    """The batch path (windows over documents laid end to end, reduceat over segments, chunks of whole
    documents) gives every document the signature its own shingle set defines: short, empty,
    punctuation-only and repetitive documents, and batches and chunks cut small."""
    import services.data_filter.dedup.minhash as mh

    base, pool = corpus()
    texts = [" ".join(w) for w in base[:40]] + ["", "one", "two words", "a b c d e", "a b c d e f", "!!! ???",
                                                 "spam " * 300, "Ünïcode wörds, façade! 12 34 56 78"]
    monkeypatch.setattr(mh, "_BATCH_WORDS", 500)  # several batches
    monkeypatch.setattr(mh, "_CHUNK_SHINGLES", 100)  # several chunks per batch, one over-long document alone
    signer = Signer(5, 14, 8, seed=3)
    got = signer.signatures(texts)
    for text, row in zip(texts, got, strict=True):
        assert np.array_equal(row, _plain_signature(signer, text)), text[:40]
    assert np.array_equal(signer.band_keys(texts), mh.fold_bands(got, 14, 8))


def test_normalised_words_byte_path_equals_the_regex_on_any_ascii_text():
    """The ASCII byte path gives the regex's words (as UTF-8 bytes) for every character class: letters
    of both cases, digits, the underscore, punctuation, whitespace and control characters."""
    import random

    from services.data_filter.dedup.minhash import _word_hash, normalised_words

    rng = random.Random(0)
    texts = ["".join(chr(rng.randrange(128)) for _ in range(rng.randrange(60))) for _ in range(3000)]
    for text in texts + ["Hello, World! foo_bar BAZ9 x-y 12.5\t\nEnd_ __ a"]:
        got = normalised_words(text)
        assert [w.decode() for w in got] == re.findall(r"[^\W_]+", text.lower()), text
    assert normalised_words("Ünïcode wörds") == ["ünïcode", "wörds"]  # not ASCII: the regex path
    assert _word_hash(b"words") == _word_hash("words")  # both paths share one word cache
