"""Length bounds on words, characters and lines: each bound inclusive, one past it out."""

from __future__ import annotations

from services.data_filter.filters.length import LengthFilter
from shared.config.filters import LengthConfig
from tests.services.data_filter.filters.edge import doc, words


def test_length_word_bounds_are_inclusive():
    f = LengthFilter(LengthConfig(min_words=10, max_words=20))
    assert f.check(doc(" ".join(words(10)))) is None
    assert f.check(doc(" ".join(words(9)))) == "too_few_words"
    assert f.check(doc(" ".join(words(20)))) is None
    assert f.check(doc(" ".join(words(21)))) == "too_many_words"


def test_length_char_and_line_bounds():
    f = LengthFilter(LengthConfig(min_chars=5, max_lines=3))
    assert f.check(doc("abcd")) == "too_few_chars"
    assert f.check(doc("a b c\nd\ne")) is None
    assert f.check(doc("a b c\nd\ne\nf")) == "too_many_lines"
