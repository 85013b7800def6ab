"""Does a document's word order carry information? A permutation test under the source's own model.

Shuffled text, word salad and random-letter gibberish share one defect: the order of their words
says nothing, so rearranging those words changes nothing that can be measured. Real text of any
kind (prose, a list page, a configuration listing) changes when its words are rearranged, in one
of two ways: the source's model predicts its neighbours (prose), or the document repeats its own
patterns (a zone file's "host IN A address" records, a shell session's prompts), which a
rearrangement breaks. The test scores both on the document and on the same words in random
orders (word units keep their attached punctuation; the last unit of every line stays in place, so
line-final punctuation and </s> keep their position): the bigram log-probability under the model,
and the number of repeated word-unit boundary pairs (Anscombe-transformed, 2 sqrt(x + 3/8): the
raw count is skewed, and its z passed 1.3% of 200 salads at 3 where a normal tail gives 0.13%);
z = (document - mean of permutations) / sd, and the document's z is the larger of the two.
Order-free text gives z near 0 (it is one more draw of the same distribution); the cut at z < 3
is one-sided. Measured with 64 permutations on 300 salads and shuffles per group (wiki/en and the
40-page handbook de and fr groups): 0.3-0.7% reach z >= 3, a heavier tail than a normal's 0.13%
(the null's sd is estimated, and log-probability sums are skewed); 32 permutations let 2 of 20
German shuffles through.

Why this and not a cut on the context gain (log P_bigram - log P_unigram per token) at the
group's quartiles: measured on the planted data-quality corpus (benchmarks/data_quality.py), word
salad drawn from a small group's own vocabulary keeps a positive gain (0.03-0.11: a word and its
attached comma are a real bigram; out-of-vocabulary words score differently under the two
models), which overlaps the clean documents' tail (0.09-0.13) in 40-document groups. Under the
permutation statistic every salad and shuffled plant there has z <= 2.7, every clean document
z >= 3.8 (the lowest: Wikipedia list pages); the repeats statistic keeps a DNS zone listing (model
z 0.75, repeats z 10.7). Cost: only the pairs at unit boundaries change under a permutation, so
only those are scored, documents are cut to their first `max_units` units, and the test is
sequential: 8 permutations decide a z far from the cut (above 6 or below 0), 64 the rest.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from services.data_filter.lm.kneser_ney import BOS
from services.data_filter.lm.ngram import Encoded, NgramModel
from services.data_filter.lm.order_kernel import order_statistics

FIRST_ROUND = 8
DECIDED_ABOVE, DECIDED_BELOW = 6.0, 0.0


def seed_of(doc_id: str) -> int:
    """A permutation seed from the document id: the same permutations on every run and worker."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8,
                                          person=b"word-order").digest(), "little")


def order_z(model: NgramModel, enc: Encoded, doc_id: str, permutations: int = 64, max_units: int = 2000) -> float:
    """z of the document's word order under `model` (nan when fewer than 3 units can move)."""
    line = enc.line_of_unit[:max_units]
    m = len(line)
    if m < 2:
        return math.nan
    same_line = line[1:] == line[:-1]  # a boundary between units j and j+1 of one line
    movable = np.flatnonzero(np.append(same_line, False))  # every unit but the last of its line
    if len(movable) < 3:
        return math.nan
    inner = np.flatnonzero(same_line)
    starts = np.flatnonzero(np.insert(~same_line, 0, True))  # first unit of each line
    rng = np.random.default_rng(seed_of(doc_id))
    arrays = (enc.unit_first[:m], enc.unit_last[:m], enc.own_first[:m], enc.own_last[:m])
    width = int(max(enc.own_first[:m].max(), enc.own_last[:m].max())) + 1

    def statistics(rows: int, with_original: bool) -> np.ndarray:
        order = np.tile(np.arange(m), (rows, 1))
        moved = 1 if with_original else 0
        # every row's shuffle in one call: the same draws as one rng.permutation per row
        shuffled = rng.permuted(np.tile(np.arange(len(movable)), (rows - moved, 1)), axis=1)
        order[moved:, movable] = movable[shuffled]
        return order_statistics(order, *arrays, inner, starts, model.keys2, model.p2, model.bo1, model.p1,
                                model.vocab_size, model.ids[BOS], width)

    stats = statistics(1 + min(FIRST_ROUND, permutations), with_original=True)
    z = max(_z(stats[:, 0]), _z(stats[:, 1], floor=1.0))
    if DECIDED_BELOW <= z <= DECIDED_ABOVE and permutations > FIRST_ROUND:
        stats = np.concatenate([stats, statistics(permutations - FIRST_ROUND, with_original=False)])
        z = max(_z(stats[:, 0]), _z(stats[:, 1], floor=1.0))
    return z


def _z(stat: np.ndarray, floor: float = 1e-9) -> float:
    """z of row 0 (the document) against the other rows (its permutations).

    `floor` bounds the sd from below: a count that no permutation varied (every one had no repeated
    pair) must not turn one chance repeat in the document into an infinite z; 1 is the sd of an
    Anscombe-transformed Poisson count.
    """
    null = stat[1:]
    sd = max(float(null.std(ddof=1)), floor)
    diff = float(stat[0] - null.mean())
    if sd < 1e-9:
        return 0.0 if abs(diff) < 1e-9 else math.copysign(math.inf, diff)
    return diff / sd
