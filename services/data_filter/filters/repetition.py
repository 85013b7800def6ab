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
Which 5-grams repeat is found in numpy on word ids (a word's id is its first position), each
5-gram hashed to 64 bits: equal 5-grams always hash alike, so no repeat is missed, and a collision
only marks a position for the exact tuple comparison that follows; word counts for the top-n-gram
bound come from the same ids.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import compress, count

import numpy as np

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter, Verdict
from shared.config.filters import RepetitionConfig

_PARA = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")
_FIVE = [True] * 5
_MIX = np.uint64(0x9E3779B97F4A7C15)


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
    return np.fromiter(map(first.setdefault, words, count()), dtype=np.uint64, count=len(words))


def repeated_fives(ids: np.ndarray) -> np.ndarray | None:
    """For each 5-gram position, whether its 5-gram (of word ids) may occur twice; None when none can.

    A 5-gram is hashed to 64 bits: every true repeat is marked, a hash collision marks more.
    """
    m = len(ids) - 4
    with np.errstate(over="ignore"):
        h = ids[:m] * _MIX
        for j in range(1, 5):
            h ^= h >> np.uint64(29)
            h ^= ids[j : j + m]
            h *= _MIX
    ordered = np.sort(h)
    if not (ordered[1:] == ordered[:-1]).any():  # the common case: every 5-gram distinct
        return None
    order = np.argsort(h)
    same = h[order[1:]] == h[order[:-1]]
    marked = np.zeros(m, dtype=bool)
    marked[order[1:][same]] = True
    marked[order[:-1][same]] = True
    return marked


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
        dup = sorted(c.dup_ngram_max_frac.items())
        ids = word_ids(words) if (top or dup) and words else None
        if top and ids is not None and top_ngram_fires(words, ids, top, size, joins):
            return "top_ngram"
        if dup and len(words) >= 5:
            marked = repeated_fives(ids)
            if marked is not None:  # some 5-gram may repeat; otherwise no n >= 5 gram can
                repeated5 = marked.tolist()
                if covered_chars(words, repeated5) / size > min(f for _, f in dup):  # else no n can reach its cut
                    for n, frac in dup:
                        if dup_ngram_chars(words, n, repeated5) / size > frac:
                            return "dup_ngram"
        return v.result


def top_ngram_fires(words: list[str], ids: np.ndarray, cuts: list[tuple[int, float]], size: int, joins: bool) -> bool:
    """Whether some top n-gram rule fires, building an n-gram Counter only where a bound cannot exclude it.

    An n-gram occurring k times has k <= count(w) for each of its words w, so its characters
    k * (len(w1) + ... + len(wn) + n - 1) are at most n * U + (n - 1) * C, where U is the most
    characters any one word covers (count x length) and C the highest word count. In prose that
    bound is a few percent of the text, far under Gopher's 16-20%, so most documents build no
    n-gram Counter at all. Once the n-gram Counter of some n has given its top count K, every
    longer n-gram occurs at most K times, which tightens the bound to m * U_K + (m - 1) * K with
    U_K the most characters a word covers when its count is capped at K. `ids` are `word_ids(words)`:
    a word's count sits at its first position, every other position counts 0.
    """
    counts = np.bincount(ids.view(np.int64), minlength=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    cap, most_chars = int(counts.max()), int((counts * lengths).max())
    for n, frac in cuts:
        if len(words) < n:
            continue
        if (n * most_chars + (n - 1) * cap * joins) / size <= frac:
            continue  # no n-gram can cover enough characters
        gram, top_count = Counter(zip(*(words[i:] for i in range(n)), strict=False)).most_common(1)[0]
        if (sum(map(len, gram)) + (n - 1 if joins else 0)) * top_count / size > frac:
            return True
        if top_count < cap:
            cap = top_count
            most_chars = int((np.minimum(counts, cap) * lengths).max())
    return False


def covered_chars(words: list[str], repeated5: list[bool]) -> int:
    """Characters of the words inside some repeated 5-gram: a bound on every duplicated n-gram count (n >= 5)."""
    covered = [False] * len(words)
    for i in compress(range(len(repeated5)), repeated5):
        covered[i : i + 5] = _FIVE
    return sum(map(len, compress(words, covered)))
