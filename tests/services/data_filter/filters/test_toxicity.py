"""Toxicity word lists per language at their edges, the regex gates against one alternation, the classifier option."""

from __future__ import annotations

from services.data_filter.filters.toxicity import ToxicityFilter
from shared.config.filters import ToxicityConfig
from tests.services.data_filter import realtext
from tests.services.data_filter.filters.edge import doc, words


def test_toxicity_ratio_edge_in_english():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.02, min_hits=2))
    body = words(98)
    assert f.check(doc(" ".join(body + ["shit,", "Fuck"]))) is None  # 2 / 100 = 0.02
    assert f.check(doc(" ".join(body[:-1] + ["shit,", "Fuck"]))) == "word_list_ratio"  # 2 / 99


def test_toxicity_is_language_aware():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.0, min_hits=1))
    text = " ".join(realtext.udhr("de")[:1]) + " Scheiße"
    assert f.check(doc(text, language="de")) == "word_list_ratio"
    assert f.check(doc(text, language="fi")) is None  # the Finnish list has no German words
    assert f.check(doc(" ".join(realtext.udhr("de")[:2]), language="de")) is None


def test_toxicity_min_hits_edge():
    f = ToxicityFilter(ToxicityConfig(max_ratio=0.0, min_hits=2))
    assert f.check(doc("Shit. " + " ".join(words(20)))) is None
    assert f.check(doc("Shit. " + " ".join(words(20)) + " fuck")) == "word_list_ratio"


def test_toxicity_counts_with_gates_equal_one_alternation_over_every_entry():
    """The token gates and the loose-entry shortcut only skip regex runs that cannot match: per language, texts
    holding every phrase entry (alone, glued to words, overlapping each other) count what one alternation counts."""
    import random
    import re

    from services.data_filter.filters.toxicity import _TOKEN, EXCLUSIONS, RESOURCES, _entries

    f = ToxicityFilter(ToxicityConfig())
    rng = random.Random(0)
    checked = 0
    for lang, wl in f.lists.items():
        skip = _entries(EXCLUSIONS / f"{lang}.txt") if (EXCLUSIONS / f"{lang}.txt").is_file() else set()
        entries = sorted(_entries(RESOURCES / f"{lang}.txt") - skip - wl.singles)
        if not entries or wl.gates is None:
            continue
        one = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(e) for e in sorted(entries, key=len, reverse=True)) + r")(?!\w)")
        for _ in range(20):
            parts = words(rng.randint(5, 40), rng.randint(0, 200))
            for e in rng.sample(entries, min(len(entries), rng.randint(0, 4))):
                parts.insert(rng.randint(0, len(parts)), rng.choice([e, e + "s", "x" + e, e + " " + e, e.upper() + "!"]))
            text = " ".join(parts)
            low = text.lower()
            tokens = _TOKEN.findall(low)
            expected = sum(1 for t in tokens if t in wl.singles) + len(one.findall(low))
            assert f.hits(doc(text), lang) == expected, (lang, text)
            checked += 1
        assert not wl.may_match(set(_TOKEN.findall(" ".join(words(60)).lower())))  # plain manual prose: no regex run
    assert checked >= 20 * 10  # 16 languages have phrase entries


def test_toxicity_classifier_option_flags_abuse_and_passes_prose():
    f = ToxicityFilter(ToxicityConfig(max_ratio=1.0, classifier=True, classifier_threshold=0.9))
    assert f.check(doc("You are a fucking idiot, shut the fuck up you stupid piece of shit.", language="en")) == "classifier"
    assert f.check(doc(realtext.prose_doc(2), language="en")) is None
