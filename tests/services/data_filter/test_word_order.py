"""The word-order test: real text of every layout shows order, text whose order says nothing does not.

Groups are built from the committed demo corpus (real Debian handbook and Wikipedia pages); the
order-free variants are made from the group's own words, as the planted benchmark makes them.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from services.data_filter.filters.perplexity import PerplexityFilter, fold_of
from services.data_filter.lm.kneser_ney import BOS
from services.data_filter.lm.order_kernel import order_statistics
from services.data_filter.lm.word_order import order_z
from shared.config.filters import PerplexityConfig
from tests.services.data_filter import realtext


def _group(source: str, lang: str, n: int) -> list[tuple[str, str]]:
    docs = [(r["id"], r["text"]) for r in realtext.demo_documents(source)
            if r["meta"].get("lang") == lang and len(r["text"].split()) >= 100]
    assert len(docs) >= n, (source, lang, len(docs))
    return docs[:n]


def _fit(docs: list[tuple[str, str]], lang: str):
    filt = PerplexityFilter(PerplexityConfig())
    folds = ([t for i, t in docs if fold_of(i) == 0], [t for i, t in docs if fold_of(i) == 1])
    return filt, filt.fit(folds, lang)


def _salad(vocab: list[str], n: int, rng: random.Random) -> str:
    words = [rng.choice(vocab) for _ in range(n)]
    return "\n".join(" ".join(words[i: i + 14]) + "." for i in range(0, n, 14))


@pytest.mark.parametrize(("source", "lang", "n"), [("handbook", "de", 40), ("handbook", "fr", 40), ("wiki", "en", 200)])
def test_real_pages_show_word_order_and_their_shuffles_and_salad_do_not(source, lang, n):
    """40 German or French handbook pages are the group size where the context-gain fence failed.

    Order-free text passes z >= 3 now and then (0.3-0.7% of 300 variants per group measured), so
    the property is a rate, as the acceptance line states it (>= 95% removed).
    """
    rng = random.Random(0)
    docs = _group(source, lang, n)
    filt, models = _fit(docs, lang)
    vocab = [w for _, t in docs for w in t.split()]
    real = [filt.score(models[fold_of(i)], i, t, lang).order_z for i, t in docs]
    order_free = []
    for i, t in docs[:20]:
        order_free.append(filt.score(models[fold_of(i)], f"shuf-{i}", realtext.shuffled(t, rng), lang).order_z)
        order_free.append(filt.score(models[fold_of(i)], f"salad-{i}", _salad(vocab, len(t.split()), rng), lang).order_z)
    assert sum(z >= 3 for z in real) / len(real) >= 0.98, sorted(real)[:5]
    assert sum(z < 3 for z in order_free) / len(order_free) >= 0.95, sorted(order_free)[-5:]


def test_a_zone_listing_shows_order_through_its_repeated_records():
    """A prose model barely sees the order of "host IN A address" records; the document's own repeats do."""
    listing = next(r for r in realtext.demo_documents("handbook") if r["id"] == "handbook-000004")
    assert listing["text"].count(" IN A ") >= 3
    docs = [d for d in _group("handbook", "en", 120) if d[0] != listing["id"]]
    filt, models = _fit(docs, "en")
    model = models[0]
    enc = model.encode(listing["text"], "en")
    assert order_z(model, enc, listing["id"]) >= 3
    shuffled = realtext.shuffled(listing["text"], random.Random(1))
    assert order_z(model, model.encode(shuffled, "en"), "shuffled") < 3


def test_gibberish_has_nothing_to_order_and_the_test_is_deterministic():
    rng = random.Random(2)
    docs = _group("wiki", "en", 80)
    filt, models = _fit(docs, "en")
    gibberish = "\n".join(" ".join("".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9)))
                                   for _ in range(12)) + "." for _ in range(15))
    assert filt.score(models[0], "g", gibberish, "en").order_z < 3
    i, t = docs[0]
    first = filt.score(models[fold_of(i)], i, t, "en")
    assert filt.score(models[fold_of(i)], i, t, "en") == first  # permutations seeded by the document id
    assert math.isnan(filt.score(models[0], "two", "two words", "en").order_z)  # nothing to permute


def _plain_statistics(model, enc, order: np.ndarray, inner: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The two statistics in numpy, as the test states them: gathers, `bigram_logprob`, a row-wise sort."""
    m = order.shape[1]
    first, last, own_first, own_last = (a[:m][order] for a in (enc.unit_first, enc.unit_last, enc.own_first, enc.own_last))
    rows = len(order)
    lp = model.bigram_logprob(last[:, inner].ravel(), first[:, inner + 1].ravel()).reshape(rows, -1).sum(axis=1)
    heads = first[:, starts].ravel()
    lp += model.bigram_logprob(np.full(heads.size, model.ids[BOS]), heads).reshape(rows, -1).sum(axis=1)
    pairs = np.sort(own_last[:, inner] * width + own_first[:, inner + 1], axis=1)
    repeats = (pairs[:, 1:] == pairs[:, :-1]).sum(axis=1).astype(np.float64)
    return np.stack([lp, 2.0 * np.sqrt(repeats + 0.375)], axis=1)


def test_compiled_statistics_equal_the_numpy_statement_on_real_and_shuffled_pages():
    docs = _group("wiki", "en", 80)
    _, models = _fit(docs, "en")
    model = models[0]
    rng = np.random.default_rng(0)
    checked = 0
    texts = [t for _, t in docs[:30]] + [realtext.shuffled(t, random.Random(3)) for _, t in docs[:10]]
    for t in texts:
        enc = model.encode(t, "en")
        m = min(len(enc.line_of_unit), 2000)
        line = enc.line_of_unit[:m]
        same_line = line[1:] == line[:-1]
        inner = np.flatnonzero(same_line)
        starts = np.flatnonzero(np.insert(~same_line, 0, True))
        width = int(max(enc.own_first[:m].max(), enc.own_last[:m].max())) + 1
        order = np.stack([np.arange(m)] + [rng.permutation(m) for _ in range(8)])
        got = order_statistics(order, enc.unit_first[:m], enc.unit_last[:m], enc.own_first[:m], enc.own_last[:m],
                               inner, starts, model.keys2, model.p2, model.bo1, model.p1, model.vocab_size,
                               model.ids[BOS], width)
        np.testing.assert_allclose(got, _plain_statistics(model, enc, order, inner, starts, width), rtol=1e-12, atol=1e-9)
        checked += 1
    assert checked == 40
