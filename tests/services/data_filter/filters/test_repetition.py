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
    from services.data_filter.filters.repetition import dup_ngram_chars

    w = words(5)
    seq = w + words(30, 100) + w  # one repeated 5-gram
    repeated = [False] * (len(seq) - 4)
    repeated[0] = repeated[-1] = True
    assert dup_ngram_chars(seq, 5, repeated) == sum(map(len, w))
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
