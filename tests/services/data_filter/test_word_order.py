"""The word-order test: real text of every layout shows order, text whose order says nothing does not.

Groups are built from the committed demo corpus (real Debian handbook and Wikipedia pages); the
order-free variants are made from the group's own words, as the planted benchmark makes them.
"""

from __future__ import annotations

import math
import random

import pytest

from services.data_filter.filters.perplexity import PerplexityFilter, fold_of
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
