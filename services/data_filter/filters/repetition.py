"""Gopher repetition rules (Rae et al. 2021, arXiv:2112.11446, table A1).

Published thresholds (the config defaults): remove a document when duplicated lines make up more
than 30% of its lines or 20% of its characters, duplicated paragraphs more than 30% of its
paragraphs or 20% of its characters; when the most frequent 2/3/4-gram covers more than
20/18/16% of the characters; or when duplicated 5..10-grams cover more than 15..10%.

Readings (as datatrove implements the paper): paragraphs split on 2+ newlines, lines on 1+; a
top n-gram's characters are its space-joined length times its count; duplicated n-gram
characters are counted greedily left to right, jumping over a repeated n-gram so overlapping
repeats are not double-counted, with words concatenated without spaces.
Languages: the n-grams are of the document language's word units; for Chinese, Japanese and Thai
the thresholds are FineWeb-2's per-language numbers (resources/languages/), and where no word
segmenter exists (Thai and similar scripts) the n-gram rules are skipped and counted while the
line and paragraph rules still apply. Without spaces, a unit n-gram's characters exclude joins.
Speed: the n-gram rules are counted over word ids by one compiled call per document
(`ngram_repeats.py`), with the bounds that spare most documents the counting.
"""

from __future__ import annotations

import re
from itertools import count

import numpy as np

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter, Verdict, over
from services.data_filter.filters.ngram_repeats import DUP_NGRAM, TOP_NGRAM, NgramRules
from shared.config.filters import RepetitionConfig

_PARA = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


def duplicates(items: list[str]) -> tuple[int, int]:
    """(number of elements seen before, characters in them)."""
    seen: set[str] = set()
    n = chars = 0
    for item in items:
        if item in seen:
            n += 1
            chars += len(item)
        else:
            seen.add(item)
    return n, chars


def split_lines(text: str) -> list[str]:
    """`re.split(r"\\n+", text)` with str.split: empty lines go, a leading or trailing empty piece stays."""
    parts = text.split("\n")
    if "\n\n" not in text or len(parts) < 3:
        return parts
    return [parts[0], *filter(None, parts[1:-1]), parts[-1]]


def split_paragraphs(text: str) -> list[str]:
    """`re.split(r"\\n{2,}", text)`, with str.split when no run is longer than two newlines."""
    return text.split("\n\n") if "\n\n\n" not in text else _PARA.split(text)


def word_ids(words: list[str]) -> np.ndarray:
    """Each word's first position in `words`: equal words get equal ids, in one pass of dict lookups."""
    first: dict[str, int] = {}
    return np.fromiter(map(first.setdefault, words, count()), dtype=np.int64, count=len(words))


class RepetitionFilter(Filter):
    name = "repetition"
    reasons = ("dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac", "top_ngram", "dup_ngram")
    # how many lines repeat is layout (a shell session repeats "$ ls"); how much text repeats is not.
    # Under review the two record how far they failed and remove past `review_margin`.
    review_reasons = frozenset({"dup_para_frac", "dup_line_frac"})

    settings = RepetitionConfig

    def __init__(self, cfg: RepetitionConfig, chain=None):
        super().__init__(cfg, chain)
        self._rules: dict[str | None, NgramRules] = {}

    def _ngram_rules(self, doc: Doc, c: RepetitionConfig) -> NgramRules:
        """The kernel's arrays for the document language's settings (built once per language, as they are)."""
        lang = doc.meta.get("language")
        if lang not in self._rules:
            self._rules[lang] = NgramRules(c.top_ngram_max_frac, c.dup_ngram_max_frac)
        return self._rules[lang]

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        text = doc.prose()
        size = len(text)
        if not size:
            return None
        v = Verdict(self, doc)
        paras = split_paragraphs(text.strip())
        n_dup, dup_chars = duplicates(paras)
        if n_dup / len(paras) > c.max_dup_para_frac and v.fail("dup_para_frac", over(n_dup / len(paras), c.max_dup_para_frac)):
            return v.result
        if dup_chars / size > c.max_dup_para_char_frac and v.fail("dup_para_char_frac"):
            return v.result
        lines = split_lines(text)
        n_dup, dup_chars = duplicates(lines)
        if n_dup / len(lines) > c.max_dup_line_frac and v.fail("dup_line_frac", over(n_dup / len(lines), c.max_dup_line_frac)):
            return v.result
        if dup_chars / size > c.max_dup_line_char_frac and v.fail("dup_line_char_frac"):
            return v.result
        if not languages.measures_words(doc.language):
            doc.skip(f"ngrams_no_segmenter:{doc.language}")
            return v.result
        words = doc.prose_words()
        if doc.markup and len(words) < c.min_prose_words:
            doc.skip("ngrams_prose_too_short")  # a short docstring's top bigram is noise, not repetition
            return v.result
        rules = self._ngram_rules(doc, c)
        if rules and words:
            lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
            found = rules.verdict(word_ids(words), lengths, size, languages.has_spaces(doc.language))
            if found == TOP_NGRAM:
                return "top_ngram"
            if found == DUP_NGRAM:
                return "dup_ngram"
        return v.result
