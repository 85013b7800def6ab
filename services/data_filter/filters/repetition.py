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
Speed: an n-gram (n >= 5) can only repeat where its leading 5-gram repeats, so positions whose
5-gram is unique are skipped without building the n-gram; the result is exactly the greedy count.
"""

from __future__ import annotations

import re
from collections import Counter

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter, Verdict
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


def top_ngram_chars(words: list[str], n: int, joins: bool = True) -> int:
    grams = Counter(zip(*(words[i:] for i in range(n)), strict=False))
    if not grams:
        return 0
    gram, count = grams.most_common(1)[0]
    return (sum(map(len, gram)) + (n - 1 if joins else 0)) * count


def dup_ngram_chars(words: list[str], n: int, repeated5: list[bool]) -> int:
    """Greedy duplicated n-gram characters; `repeated5[i]` says the 5-gram at i occurs twice or more."""
    total = len(words)
    seen: set[tuple[str, ...]] = set()
    chars = idx = 0
    while idx < total - n + 1:
        if not repeated5[idx]:
            idx += 1  # its n-gram cannot occur again, so it never matches later: no need to store it
            continue
        gram = tuple(words[idx : idx + n])
        if gram in seen:
            chars += sum(map(len, gram))
            idx += n
        else:
            seen.add(gram)
            idx += 1
    return chars


class RepetitionFilter(Filter):
    name = "repetition"
    reasons = ("dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac", "top_ngram", "dup_ngram")
    # how many lines repeat is layout (a shell session repeats "$ ls"); how much text repeats is not
    review_reasons = frozenset({"dup_para_frac", "dup_line_frac"})

    settings = RepetitionConfig

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        text = doc.text
        size = len(text)
        if not size:
            return None
        v = Verdict(self)
        paras = _PARA.split(text.strip())
        n_dup, dup_chars = duplicates(paras)
        if n_dup / len(paras) > c.max_dup_para_frac and v.fail("dup_para_frac"):
            return v.result
        if dup_chars / size > c.max_dup_para_char_frac and v.fail("dup_para_char_frac"):
            return v.result
        lines = _LINES.split(text)
        n_dup, dup_chars = duplicates(lines)
        if n_dup / len(lines) > c.max_dup_line_frac and v.fail("dup_line_frac"):
            return v.result
        if dup_chars / size > c.max_dup_line_char_frac and v.fail("dup_line_char_frac"):
            return v.result
        if not languages.measures_words(doc.language):
            doc.skip(f"ngrams_no_segmenter:{doc.language}")
            return v.result
        words = doc.words()
        joins = languages.has_spaces(doc.language)
        for n, frac in sorted(c.top_ngram_max_frac.items()):
            if len(words) >= n and top_ngram_chars(words, n, joins) / size > frac:
                return "top_ngram"
        dup = sorted(c.dup_ngram_max_frac.items())
        if dup and len(words) >= 5:
            fives = list(zip(*(words[i:] for i in range(5)), strict=False))
            counts = Counter(fives)
            if len(counts) < len(fives):  # some 5-gram repeats; otherwise no n >= 5 gram can
                repeated5 = [counts[g] > 1 for g in fives]
                for n, frac in dup:
                    if dup_ngram_chars(words, n, repeated5) / size > frac:
                        return "dup_ngram"
        return v.result
