"""The word-order test's two statistics for every arrangement of a document, compiled.

For each row of `order` (the document's word units in one arrangement: the original or a
permutation) the test needs the bigram log-probability of the pairs at unit boundaries plus each
line's first unit after <s>, and how many boundary pairs of the document's own units repeat
(Anscombe-transformed); `word_order.py` says why. In numpy that was four gathers of the whole
(arrangements x units) matrix, a `searchsorted` over every pair, a row-wise sort and three
reductions per round of permutations; here it is one pass per row, the bigram looked up by binary
search in the model's sorted keys with ARPA's back-off to the unigram level, as
`NgramModel.bigram_logprob` does (`tests/services/data_filter/test_word_order.py` holds the two equal).

Compiled with numba on first use and cached next to this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _bigram(prev, cur, keys2, p2, bo1, p1, vocab):
    key = prev * vocab + cur
    at = np.searchsorted(keys2, key)
    if at < keys2.size and keys2[at] == key:
        return p2[at]
    return bo1[prev] + p1[cur]


@njit(cache=True)
def order_statistics(order, first, last, own_first, own_last, inner, starts, keys2, p2, bo1, p1, vocab, bos, width):
    """(rows, 2): per arrangement, the bigram log10-probability and 2·sqrt(repeated pairs + 3/8).

    `order[r]` lists unit indices; `first`/`last` are each unit's first/last token id under the
    model, `own_first`/`own_last` the same numbered within the document (`width` bounds them);
    `inner` are the boundaries j (units j, j + 1 on one line), `starts` each line's first position.
    """
    rows = order.shape[0]
    out = np.empty((rows, 2))
    pairs = np.empty(inner.size, np.int64)
    for r in range(rows):
        lp = 0.0
        for t in range(inner.size):
            a, b = order[r, inner[t]], order[r, inner[t] + 1]
            lp += _bigram(last[a], first[b], keys2, p2, bo1, p1, vocab)
            pairs[t] = own_last[a] * width + own_first[b]
        for s in starts:
            lp += _bigram(bos, first[order[r, s]], keys2, p2, bo1, p1, vocab)
        pairs.sort()
        repeats = 0
        for t in range(1, pairs.size):
            if pairs[t] == pairs[t - 1]:
                repeats += 1
        out[r, 0] = lp
        out[r, 1] = 2.0 * math.sqrt(repeats + 0.375)
    return out
