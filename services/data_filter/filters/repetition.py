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
from itertools import compress, repeat
from operator import mul

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter, Verdict
from shared.config.filters import RepetitionConfig

_PARA = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")
_FIVE = [True] * 5


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
        text = doc.prose()
        size = len(text)
        if not size:
            return None
        v = Verdict(self)
        paras = split_paragraphs(text.strip())
        n_dup, dup_chars = duplicates(paras)
        if n_dup / len(paras) > c.max_dup_para_frac and v.fail("dup_para_frac"):
            return v.result
        if dup_chars / size > c.max_dup_para_char_frac and v.fail("dup_para_char_frac"):
            return v.result
        lines = split_lines(text)
        n_dup, dup_chars = duplicates(lines)
        if n_dup / len(lines) > c.max_dup_line_frac and v.fail("dup_line_frac"):
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
        joins = languages.has_spaces(doc.language)
        top = sorted(c.top_ngram_max_frac.items())
        if top and top_ngram_fires(words, top, size, joins):
            return "top_ngram"
        dup = sorted(c.dup_ngram_max_frac.items())
        if dup and len(words) >= 5:
            fives = list(zip(*(words[i:] for i in range(5)), strict=False))
            counts = Counter(fives)
            if len(counts) < len(fives):  # some 5-gram repeats; otherwise no n >= 5 gram can
                repeated5 = [counts[g] > 1 for g in fives]
                if covered_chars(words, repeated5) / size > min(f for _, f in dup):  # else no n can reach its cut
                    for n, frac in dup:
                        if dup_ngram_chars(words, n, repeated5) / size > frac:
                            return "dup_ngram"
        return v.result


def top_ngram_fires(words: list[str], cuts: list[tuple[int, float]], size: int, joins: bool) -> bool:
    """Whether some top n-gram rule fires, building an n-gram Counter only where a bound cannot exclude it.

    An n-gram occurring k times has k <= count(w) for each of its words w, so its characters
    k * (len(w1) + ... + len(wn) + n - 1) are at most n * U + (n - 1) * C, where U is the most
    characters any one word covers (count x length) and C the highest word count. In prose that
    bound is a few percent of the text, far under Gopher's 16-20%, so most documents build no
    n-gram Counter at all. Once the n-gram Counter of some n has given its top count K, every
    longer n-gram occurs at most K times, which tightens the bound to m * U_K + (m - 1) * K with
    U_K the most characters a word covers when its count is capped at K.
    """
    counts = Counter(words)
    lengths = list(map(len, counts))
    cap, most_chars = max(counts.values()), max(map(mul, counts.values(), lengths))
    for n, frac in cuts:
        if len(words) < n:
            continue
        if (n * most_chars + (n - 1) * cap * joins) / size <= frac:
            continue  # no n-gram can cover enough characters
        grams = Counter(zip(*(words[i:] for i in range(n)), strict=False))
        gram, count = grams.most_common(1)[0]
        if (sum(map(len, gram)) + (n - 1 if joins else 0)) * count / size > frac:
            return True
        if count < cap:
            cap = count
            most_chars = max(map(mul, map(min, counts.values(), repeat(cap)), lengths))
    return False


def covered_chars(words: list[str], repeated5: list[bool]) -> int:
    """Characters of the words inside some repeated 5-gram: a bound on every duplicated n-gram count (n >= 5)."""
    covered = [False] * len(words)
    for i in compress(range(len(repeated5)), repeated5):
        covered[i : i + 5] = _FIVE
    return sum(map(len, compress(words, covered)))
