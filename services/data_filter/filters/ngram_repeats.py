"""Gopher's n-gram repetition rules over word ids, compiled: one call per document.

The rules (top 2/3/4-gram share, duplicated 5..10-gram share; readings in `repetition.py`) are
counting over a document's words. In Python every document paid a Counter of tuples, a set of
tuples and a dozen numpy calls; here the words arrive as ids (equal words, equal ids) with their
lengths, and n-grams are counted in one open-addressing table keyed by the position of an n-gram's
first occurrence, with an exact comparison of ids on every probe (the hash only picks the slot,
so a collision costs a probe, never a wrong count). The verdicts are the plain reading's exactly
(`tests/services/data_filter/filters/test_repetition.py` holds them equal on random repetitive
text), including its tie rule: of equally frequent top n-grams, the earliest first occurrence
counts, as `Counter.most_common` gives it.

The bounds that let most documents skip the counting are kept: the top n-gram's characters are at
most n·U + (n - 1)·C (U the most characters any word covers, C the highest word count), tightened
once a count is known; and an n-gram (n >= 5) can only repeat where its leading 5-gram does.

Compiled with numba on first use (about 5 s) and cached next to this file, so later processes load
it in milliseconds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NONE, TOP_NGRAM, DUP_NGRAM = 0, 1, 2

_FNV_OFFSET = np.uint64(1469598103934665603)
_FNV_PRIME = np.uint64(1099511628211)
_SHIFT = np.uint64(29)


@njit(cache=True, inline="always")
def _slot_hash(ids, at, n):
    h = _FNV_OFFSET
    for k in range(n):
        h = (h ^ np.uint64(ids[at + k])) * _FNV_PRIME
        h ^= h >> _SHIFT
    return h


@njit(cache=True, inline="always")
def _equal(ids, a, b, n):
    for k in range(n):
        if ids[a + k] != ids[b + k]:
            return False
    return True


@njit(cache=True, inline="always")
def _find(table, ids, at, n, mask):
    """The slot of the n-gram at `at`: where its first occurrence sits, or the empty slot it would take."""
    s = np.int64(_slot_hash(ids, at, n) & np.uint64(mask))
    while table[s] >= 0 and not _equal(ids, table[s], at, n):
        s = (s + 1) & mask
    return s


@njit(cache=True)
def ngram_verdict(ids, lengths, size, top_n, top_frac, dup_n, dup_frac, joins):
    """NONE, TOP_NGRAM or DUP_NGRAM for one document.

    `ids[i]` is word i's id (equal words, equal ids, each below len(ids)), `lengths[i]` its
    characters, `size` the text's characters; `top_n`/`top_frac` and `dup_n`/`dup_frac` the rules'
    n and cut-offs in increasing n; `joins` whether an n-gram's characters count the n - 1 spaces.
    """
    N = ids.size
    cap = 2
    while cap < 2 * N + 2:
        cap *= 2
    mask = cap - 1
    table = np.empty(cap, np.int64)  # first position of the n-gram in each slot, -1 when empty
    count = np.empty(cap, np.int64)

    word_count = np.zeros(N, np.int64)
    for i in range(N):
        word_count[ids[i]] += 1
    most_count, most_chars = 0, 0
    for w in range(N):
        most_count = max(most_count, word_count[w])
        most_chars = max(most_chars, word_count[w] * lengths[w])

    for t in range(top_n.size):
        n, frac = top_n[t], top_frac[t]
        if N < n:
            continue
        if (n * most_chars + (n - 1) * most_count * joins) / size <= frac:
            continue  # no n-gram can cover enough characters
        table[:] = -1
        best, best_at = 0, 0
        for i in range(N - n + 1):
            s = _find(table, ids, i, n, mask)
            if table[s] < 0:
                table[s], count[s] = i, 1
            else:
                count[s] += 1
            if count[s] > best or (count[s] == best and table[s] < best_at):
                best, best_at = count[s], table[s]
        chars = (n - 1) * joins
        for k in range(n):
            chars += lengths[best_at + k]
        if chars * best / size > frac:
            return TOP_NGRAM
        if best < most_count:  # no longer n-gram occurs more often than this one
            most_count, most_chars = best, 0
            for w in range(N):
                most_chars = max(most_chars, min(word_count[w], best) * lengths[w])

    if dup_n.size == 0 or N < 5:
        return NONE
    table[:] = -1
    repeated5 = np.zeros(N, np.bool_)  # the 5-gram at i occurs twice or more
    some = False
    for i in range(N - 4):
        s = _find(table, ids, i, 5, mask)
        if table[s] < 0:
            table[s] = i
        else:
            repeated5[i] = True
            repeated5[table[s]] = True
            some = True
    if not some:
        return NONE
    covered, end = 0, -1  # characters of the words inside a repeated 5-gram bound every n >= 5
    for i in range(N - 4):
        if repeated5[i]:
            for k in range(max(i, end + 1), i + 5):
                covered += lengths[k]
            end = i + 4
    if covered / size <= dup_frac.min():
        return NONE
    for t in range(dup_n.size):
        n, frac = dup_n[t], dup_frac[t]
        table[:] = -1
        chars, at = 0, 0
        while at < N - n + 1:  # greedy: a repeat is counted and jumped over, anything else remembered
            if not repeated5[at]:
                at += 1  # its n-gram occurs nowhere else: it can neither match nor be matched
                continue
            s = _find(table, ids, at, n, mask)
            if table[s] >= 0:
                for k in range(n):
                    chars += lengths[at + k]
                at += n
            else:
                table[s] = at
                at += 1
        if chars / size > frac:
            return DUP_NGRAM
    return NONE


class NgramRules:
    """One chain's n-gram rules as the arrays the kernel takes (built once per configuration)."""

    def __init__(self, top: dict[int, float], dup: dict[int, float]):
        top_items, dup_items = sorted(top.items()), sorted(dup.items())
        self.top_n = np.array([n for n, _ in top_items], dtype=np.int64)
        self.top_frac = np.array([f for _, f in top_items], dtype=np.float64)
        self.dup_n = np.array([n for n, _ in dup_items], dtype=np.int64)
        self.dup_frac = np.array([f for _, f in dup_items], dtype=np.float64)

    def __bool__(self) -> bool:
        return bool(self.top_n.size or self.dup_n.size)

    def verdict(self, ids: np.ndarray, lengths: np.ndarray, size: int, joins: bool) -> int:
        return ngram_verdict(ids, lengths, size, self.top_n, self.top_frac, self.dup_n, self.dup_frac, joins)
