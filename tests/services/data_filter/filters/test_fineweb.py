"""FineWeb's line rules at their edges: terminal punctuation, short lines, newlines, duplicated lines."""

from __future__ import annotations

from services.data_filter.filters.fineweb import FineWebFilter
from shared.config.filters import FineWebConfig
from tests.services.data_filter import realtext
from tests.services.data_filter.filters.edge import doc, words


def fineweb(**kw) -> FineWebFilter:
    return FineWebFilter(FineWebConfig(**kw))


def test_fineweb_line_punctuation_ratio_edge():
    f = fineweb(max_short_line_ratio=1.0, max_newline_ratio=10.0)
    lines = [" ".join(words(8, i * 8)) for i in range(25)]
    ok = lines[:]
    for i in range(3):
        ok[i] += "."  # 3 / 25 = 0.12, not below
    assert f.check(doc("\n".join(ok))) is None
    bad = lines[:]
    for i in range(2):
        bad[i] += "."
    assert f.check(doc("\n".join(bad))) == "line_punct_ratio"


def test_fineweb_short_line_ratio_edge():
    f = fineweb(min_line_punct_ratio=0.0, max_newline_ratio=10.0)
    long = [" ".join(words(8, i * 8)) + "." for i in range(100)]
    short = [f"Item {i}." for i in range(100)]
    assert f.check(doc("\n".join(short[:67] + long[:33]))) is None  # 0.67
    assert f.check(doc("\n".join(short[:68] + long[:32]))) == "short_line_ratio"


def test_fineweb_newline_ratio_and_duplicate_lines():
    f = fineweb(min_line_punct_ratio=0.0, max_short_line_ratio=1.0)
    lines = [" ".join(words(3, i * 3)) + "." for i in range(10)]  # 9 newlines / 30 words = 0.3
    assert f.check(doc("\n".join(lines))) is None
    lines.append("Yes.")
    assert f.check(doc("\n".join(lines))) == "newline_ratio"  # 10 / 31 > 0.3
    paras = [realtext.manual_paragraphs()[i] for i in range(4)]
    assert fineweb().check(doc("\n".join(paras + [paras[0]]))) == "dup_line_char_ratio"
