"""Gopher's repetition rules at their edges, their published defaults, and real prose passing every prose rule."""

from __future__ import annotations

from services.data_filter.filters.gopher_quality import GopherQualityFilter
from services.data_filter.filters.repetition import RepetitionFilter
from shared.config.filters import GopherQualityConfig, RepetitionConfig
from tests.services.data_filter import realtext
from tests.services.data_filter.filters.edge import doc, words


def rep(**kw) -> RepetitionFilter:
    big = dict(top_ngram_max_frac={}, dup_ngram_max_frac={})
    return RepetitionFilter(RepetitionConfig(**{**big, **kw}))


def test_repetition_duplicate_line_fraction_edge():
    f = rep(max_dup_line_char_frac=1.0, max_dup_para_frac=1.0, max_dup_para_char_frac=1.0)
    uniq = [" ".join(words(8, i * 8)) for i in range(7)]
    assert f.check(doc("\n".join(uniq + [uniq[0]] * 3))) is None  # 3 / 10 = 0.3
    assert f.check(doc("\n".join(uniq[:6] + [uniq[0]] * 4))) == "dup_line_frac"  # 4 / 10


def test_repetition_duplicate_line_char_fraction_edge():
    f = rep(max_dup_line_frac=1.0, max_dup_para_frac=1.0, max_dup_para_char_frac=1.0, max_dup_line_char_frac=0.2)
    line = "x" * 20
    assert f.check(doc(f"{line}\n{'y' * 58}\n{line}")) is None  # 20 duplicated of 100 chars = 0.2
    assert f.check(doc(f"{line}\n{'y' * 57}\n{line}")) == "dup_line_char_frac"  # 20 of 99


def test_repetition_duplicate_paragraph_fraction_edges():
    f = rep(max_dup_line_frac=1.0, max_dup_line_char_frac=1.0, max_dup_para_char_frac=1.0)
    paras = [" ".join(words(8, i * 8)) for i in range(7)]
    assert f.check(doc("\n\n".join(paras + [paras[1]] * 3))) is None  # 3 / 10 = 0.3
    assert f.check(doc("\n\n".join(paras[:6] + [paras[1]] * 4))) == "dup_para_frac"
    g = rep(max_dup_line_frac=1.0, max_dup_line_char_frac=1.0, max_dup_para_frac=1.0)
    a, b = "x" * 20, "y" * 56  # 20 + 2 + 56 + 2 + 20 = 100 characters
    assert g.check(doc(f"{a}\n\n{b}\n\n{a}")) is None  # 20 / 100 = 0.2
    assert g.check(doc(f"{a}\n\n{b[:-1]}\n\n{a}")) == "dup_para_char_frac"  # 20 / 99


def test_repetition_top_2gram_edge():
    f = rep(top_ngram_max_frac={2: 0.20})
    # "ab cd" (5 chars incl. space) repeated k times in a text of total length L
    pair = "ab cd"
    filler = " ".join(words(40))
    for k in range(1, 30):
        text = " ".join([pair] * k) + " " + filler
        share = (5 * k) / len(text)
        verdict = f.check(doc(text))
        assert (verdict == "top_ngram") == (share > 0.20), (k, share, verdict)


def test_repetition_duplicated_5gram_edge_and_greedy_count():
    w = words(5)
    seq = w + words(30, 100) + w  # one repeated 5-gram
    dup_chars = sum(map(len, w))
    text = " ".join(seq)
    frac = dup_chars / len(text)
    assert rep(dup_ngram_max_frac={5: frac}).check(doc(text)) is None
    assert rep(dup_ngram_max_frac={5: frac - 1e-6}).check(doc(text)) == "dup_ngram"


def test_repetition_defaults_are_gophers_table_a1():
    c = RepetitionConfig()
    assert c.top_ngram_max_frac == {2: 0.20, 3: 0.18, 4: 0.16}
    assert c.dup_ngram_max_frac == {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    assert (c.max_dup_line_frac, c.max_dup_para_frac, c.max_dup_line_char_frac, c.max_dup_para_char_frac) == (0.3, 0.3, 0.2, 0.2)


def test_real_prose_passes_all_default_prose_rules():
    d = doc(realtext.prose_doc(6, start=10))
    for f in (RepetitionFilter(RepetitionConfig()), GopherQualityFilter(GopherQualityConfig())):
        assert f.check(d) is None, f.name


def reference_ngram_verdict(words: list[str], size: int, cfg: RepetitionConfig, joins: bool = True) -> str | None:
    """Gopher's n-gram rules written out plainly: an n-gram Counter per n, the greedy scan over every position."""
    from collections import Counter

    for n, frac in sorted(cfg.top_ngram_max_frac.items()):
        if len(words) >= n:
            gram, count = Counter(zip(*(words[i:] for i in range(n)), strict=False)).most_common(1)[0]
            if (sum(map(len, gram)) + (n - 1) * joins) * count / size > frac:
                return "top_ngram"
    for n, frac in sorted(cfg.dup_ngram_max_frac.items()):
        grams = list(zip(*(words[i:] for i in range(n)), strict=False))
        met: set[tuple[str, ...]] = set()
        covered, at = 0, 0
        while at < len(grams):  # a repeat is counted and jumped over; anything else is remembered
            step = n if grams[at] in met else 1
            covered += sum(map(len, grams[at])) if step == n else 0
            met.add(grams[at])
            at += step
        if covered / size > frac:
            return "dup_ngram"
    return None


def test_ngram_rules_equal_the_plain_reading_on_repetitive_random_text():
    """The bounds, the hashed 5-gram screen and the id-based counts change the cost, never the verdict."""
    import random

    rng = random.Random(3)
    cfg = RepetitionConfig(max_dup_line_frac=1.0, max_dup_line_char_frac=1.0, max_dup_para_frac=1.0,
                           max_dup_para_char_frac=1.0)
    f = RepetitionFilter(cfg)
    vocab = ["a", "bb", "the", "of", "cat", "dogs", "ran", "é", "zz", "quick", "brown", "jumped"]
    verdicts = set()
    for _ in range(3000):
        base = [rng.choice(vocab[: rng.randint(2, len(vocab))]) for _ in range(rng.randint(1, 80))]
        if rng.random() < 0.5 and len(base) > 12:  # a repeated run, as a copied sentence would be
            s, k = rng.randrange(len(base) - 10), rng.randint(5, 10)
            base = base[: s + k] + base[s : s + k] * rng.randint(1, 3) + base[s + k :]
        text = " ".join(base)
        expected = reference_ngram_verdict(text.split(), len(text), cfg)
        assert f.check(doc(text)) == expected, text
        verdicts.add(expected)
    assert verdicts == {None, "top_ngram", "dup_ngram"}  # every branch met


def test_compiled_counts_equal_the_plain_reading_with_and_without_joins():
    """The kernel on its own: units without spaces (zh, ja) count no joins; ties between equally
    frequent top n-grams of different lengths go to the earliest, as `Counter.most_common` does."""
    import random

    import numpy as np

    from services.data_filter.filters.ngram_repeats import DUP_NGRAM, TOP_NGRAM, NgramRules
    from services.data_filter.filters.repetition import word_ids

    rng = random.Random(5)
    cfg = RepetitionConfig()
    rules = NgramRules(cfg.top_ngram_max_frac, cfg.dup_ngram_max_frac)
    names = {0: None, TOP_NGRAM: "top_ngram", DUP_NGRAM: "dup_ngram"}
    vocab = ["我", "们", "的", "是", "中国", "人民", "a", "bbb", "cc"]
    seen = set()
    for _ in range(2000):
        units = [rng.choice(vocab[: rng.randint(2, len(vocab))]) for _ in range(rng.randint(1, 60))]
        if rng.random() < 0.5 and len(units) > 12:
            s, k = rng.randrange(len(units) - 10), rng.randint(5, 10)
            units = units[: s + k] + units[s : s + k] * rng.randint(1, 3) + units[s + k :]
        joins = rng.random() < 0.5
        size = sum(map(len, units)) + (len(units) - 1) * joins + rng.randint(0, 40)
        lengths = np.fromiter(map(len, units), dtype=np.int64, count=len(units))
        got = names[rules.verdict(word_ids(units), lengths, size, joins)]
        assert got == reference_ngram_verdict(units, size, cfg, joins), (units, size, joins)
        seen.add(got)
    assert seen == {None, "top_ngram", "dup_ngram"}
    # a tie: "c d" and "aaaa bb" both occur twice; the first seen counts (3 characters twice, not 7)
    units = ["c", "d", "aaaa", "bb", "c", "d", "q", "aaaa", "bb"]
    lengths = np.fromiter(map(len, units), dtype=np.int64, count=len(units))
    tie = RepetitionConfig(top_ngram_max_frac={2: 0.1}, dup_ngram_max_frac={})
    assert reference_ngram_verdict(units, 100, tie) is None  # 6 / 100, where "aaaa bb" would give 14 / 100
    assert NgramRules({2: 0.1}, {}).verdict(word_ids(units), lengths, 100, True) == 0
    assert NgramRules({2: 0.05}, {}).verdict(word_ids(units), lengths, 100, True) == TOP_NGRAM
    assert NgramRules({2: 0.0}, {}).verdict(word_ids(units[:1]), lengths[:1], 4, True) == 0  # fewer words than n
