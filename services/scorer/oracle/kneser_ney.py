"""Interpolated Kneser–Ney trigram model over word tokens, the stand-in oracle's fluency signal.

Kneser & Ney (1995), interpolated form with one absolute discount D = 0.75 per order (Chen &
Goodman 1998 found 0.75 close to the estimated optimum for the lower orders):

    P(w | u v) = max(c(u v w) − D, 0) / c(u v ·) + D · N1+(u v ·) / c(u v ·) · P2(w | v)
    P2(w | v)  = max(N1+(· v w) − D, 0) / N1+(· v ·) + D · N1+(v ·) / N1+(· v ·) · P1(w)
    P1(w)      = (N1+(· w) + 1) / (N1+(· ·) + |V|)            (continuation counts, add-one)

A context never seen falls through to the next order with weight 1. Words seen fewer than twice in
the reference map to `<unk>`, so a misspelling costs the probability of an unknown word in its
context. Written here (about 60 lines) rather than imported: KenLM's estimator is not installable
on these machines, and services do not import each other (the data filter has its own model).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
DISCOUNT = 0.75


class KneserNeyTrigram:
    def __init__(self, sentences: Iterable[list[str]], min_count: int = 2) -> None:
        sentences = [s for s in sentences if s]
        words = Counter(w for s in sentences for w in s)
        self.vocab = {w for w, c in words.items() if c >= min_count}
        c3: Counter = Counter()
        for s in sentences:
            toks = [BOS, BOS, *self.map(s), EOS]
            c3.update(zip(toks, toks[1:], toks[2:], strict=False))
        self.c3 = c3
        self.ctx3: Counter = Counter()
        self.follow3: Counter = Counter()
        cc2: Counter = Counter()  # N1+(· v w)
        for (u, v, w), c in c3.items():
            self.ctx3[(u, v)] += c
            self.follow3[(u, v)] += 1
            cc2[(v, w)] += 1
        self.cc2 = cc2
        self.ctx2: Counter = Counter()
        self.follow2: Counter = Counter()
        cc1: defaultdict = defaultdict(int)  # N1+(· w)
        for (v, w), c in cc2.items():
            self.ctx2[v] += c
            self.follow2[v] += 1
            cc1[w] += 1
        self.cc1 = dict(cc1)
        self.n_bigram_types = len(cc2)
        self.n_vocab = len(self.vocab) + 2  # + <unk>, </s>

    def map(self, words: list[str]) -> list[str]:
        return [w if w in self.vocab else UNK for w in words]

    def _p1(self, w: str) -> float:
        return (self.cc1.get(w, 0) + 1) / (self.n_bigram_types + self.n_vocab)

    def _p2(self, v: str, w: str) -> float:
        n = self.ctx2.get(v, 0)
        if not n:
            return self._p1(w)
        return max(self.cc2.get((v, w), 0) - DISCOUNT, 0) / n + DISCOUNT * self.follow2[v] / n * self._p1(w)

    def prob(self, u: str, v: str, w: str) -> float:
        n = self.ctx3.get((u, v), 0)
        if not n:
            return self._p2(v, w)
        return (max(self.c3.get((u, v, w), 0) - DISCOUNT, 0) / n
                + DISCOUNT * self.follow3[(u, v)] / n * self._p2(v, w))

    def log2_perplexity(self, sentences: Iterable[list[str]]) -> float:
        """Mean −log2 P per predicted token (end-of-sentence included); 0.0 for no tokens."""
        total, n = 0.0, 0
        for s in sentences:
            toks = [BOS, BOS, *self.map(s), EOS]
            for u, v, w in zip(toks, toks[1:], toks[2:], strict=False):
                total -= math.log2(self.prob(u, v, w))
                n += 1
        return total / n if n else 0.0
