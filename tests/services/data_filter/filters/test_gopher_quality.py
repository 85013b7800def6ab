"""Gopher's quality rules, each at its threshold's edge: one document just in, one just out."""

from __future__ import annotations

from services.data_filter.filters.gopher_quality import GopherQualityFilter
from shared.config.filters import GopherQualityConfig
from tests.services.data_filter.filters.edge import doc, words


def gopher(**kw) -> GopherQualityFilter:
    return GopherQualityFilter(GopherQualityConfig(**kw))


def stop_prose(n: int) -> str:
    """n words of real prose words with two stop words guaranteed."""
    return " ".join(["the", "of", *words(n - 2)])


def test_gopher_min_words_edge():
    f = gopher()
    assert f.check(doc(stop_prose(50))) is None
    assert f.check(doc(stop_prose(49))) == "too_few_words"


def test_gopher_max_words_edge():
    f = gopher(max_words=120)
    assert f.check(doc(stop_prose(120))) is None
    assert f.check(doc(stop_prose(121))) == "too_many_words"


def test_gopher_mean_word_length_edges():
    f = gopher()
    # 60 words of exactly 3 letters has mean 3 (in); one two-letter word pulls it below 3 (out)
    three = [w[:3] for w in words(58)]
    assert f.check(doc(" ".join(["the", "and", *three]))) is None
    assert f.check(doc(" ".join(["the", "of", *three]))) == "mean_word_length_low"
    ten = [(w * 4)[:10] for w in words(60)]
    f = gopher(min_stop_words=0)
    assert f.check(doc(" ".join(ten))) is None  # mean exactly 10
    assert f.check(doc(" ".join(ten[:-1] + ["abcdefghijk"]))) == "mean_word_length_high"


def test_gopher_hash_ratio_edge():
    f = gopher()
    base = stop_prose(100).split()
    assert f.check(doc(" ".join(base) + " " + "#" * 10)) is None  # 10 / 101 words < 0.1
    assert f.check(doc(" ".join(base) + " " + "#" * 11)) == "too_many_hashes"  # 11 / 101 > 0.1


def test_gopher_ellipsis_per_word_edge():
    f = gopher(max_ellipsis_lines_ratio=1.0)
    base = stop_prose(100).split()
    assert f.check(doc(" ".join(base) + " " + " ".join(["…"] * 10))) is None  # 10 / 110 words
    assert f.check(doc(" ".join(base) + " " + "…" * 12)) == "too_many_ellipses"  # 12 / 101 > 0.1


def test_gopher_bullet_lines_edge():
    f = gopher()
    lines = [f"- {' '.join(words(6, i * 6))}" for i in range(9)] + ["the of " + " ".join(words(6, 99))]
    assert f.check(doc("\n".join(lines))) is None  # 9 / 10 = 0.9, not above
    lines[-1] = "- " + lines[-1]
    assert f.check(doc("\n".join(lines))) == "too_many_bullet_lines"


def test_gopher_ellipsis_lines_edge():
    f = gopher()
    lines = ["the of " + " ".join(words(10, i * 10)) + ("…" if i < 3 else ".") for i in range(10)]
    assert f.check(doc("\n".join(lines))) is None  # 3 / 10 = 0.3
    lines[3] = lines[3][:-1] + "…"
    assert f.check(doc("\n".join(lines))) == "too_many_ellipsis_lines"


def test_gopher_alpha_words_edge():
    f = gopher()
    base = stop_prose(80).split()
    assert f.check(doc(" ".join(base + ["1984"] * 20))) is None  # 80 / 100 = 0.8
    assert f.check(doc(" ".join(base + ["1984"] * 21))) == "too_few_alpha_words"


def test_gopher_stop_words_edge():
    f = gopher()
    body = [w for w in words(80) if w.lower() not in GopherQualityConfig().stop_words]
    assert f.check(doc(" ".join(["The,", "of", *body]))) is None
    assert f.check(doc(" ".join(["The,", "Cat", *body]))) == "too_few_stop_words"
