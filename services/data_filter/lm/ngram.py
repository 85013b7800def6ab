"""Score text under an estimated Kneser-Ney model in memory, plus the unigram model of the same text.

Why in memory: the perplexity filter fits two small models per (source, language) on every run, so
writing ARPA and loading it into KenLM would cost more than the scoring; the lookups here follow
ARPA's back-off rule exactly (a test checks them against KenLM on the same ARPA file). Tokens are
`tokenize_for(language)`: CCNet's normalisation (lower case, digits to 0, punctuation split) on the
language's word units, so Chinese and Japanese are modelled on characters / character-class runs.
The unigram model (maximum likelihood, add-1/2 smoothing) is what the "context gain" compares to:
log10 P_unigram - log10 P_ngram per token, near 0 for shuffled text and word salad, whose words are
real but whose neighbours say nothing about each other.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from services.data_filter import languages
from services.data_filter.lm.kneser_ney import BOS, EOS, UNK, estimate, tokenize

_DIGIT = re.compile(r"\d")
_PUNCT_SPLIT = re.compile(r"\w+|[^\w\s]")


def tokenize_for(line: str, language: str | None) -> list[str]:
    if languages.has_spaces(language):
        return tokenize(line)
    out: list[str] = []
    for unit in languages.words(_DIGIT.sub("0", line.lower()), language):
        out.extend(_PUNCT_SPLIT.findall(unit) if not unit.isalnum() else (unit,))
    return out


def sentences(text: str, language: str | None) -> list[list[str]]:
    return [t for line in text.split("\n") if (t := tokenize_for(line, language))]


class NgramModel:
    """An order-n Kneser-Ney model (from `kneser_ney.estimate`) and the unigram ML model of its text."""

    def __init__(self, sents: Iterable[list[str]], order: int = 2):
        sents = list(sents)
        if not sents:
            raise ValueError("no text to fit a language model on")
        self.order = order
        self.table = estimate(sents, order)
        counts = Counter(w for s in sents for w in (*s, EOS))
        total = sum(counts.values())
        denom = total + 0.5 * (len(counts) + 1)
        self.unigram = {w: math.log10((c + 0.5) / denom) for w, c in counts.items()}
        self.unigram_unk = math.log10(0.5 / denom)
        self.unk = self.table[1][(UNK,)][0]
        self.tokens = total

    def logprob(self, context: tuple[str, ...], word: str) -> float:
        """log10 P(word | context) by ARPA back-off over the stored n-grams."""
        backoff = 0.0
        ctx = context[-(self.order - 1):] if self.order > 1 else ()
        while True:
            entry = self.table[len(ctx) + 1].get((*ctx, word))
            if entry is not None:
                return backoff + entry[0]
            if not ctx:
                return backoff + self.unk
            found = self.table[len(ctx)].get(ctx)
            if found is not None:
                backoff += found[1]
            ctx = ctx[1:]

    def score(self, sents: list[list[str]]) -> tuple[float, float, int]:
        """(log10 perplexity, context gain per token, tokens) of a document given as token lists."""
        total = uni = 0.0
        n = 0
        keep = self.order - 1
        for toks in sents:
            context: tuple[str, ...] = (BOS,)
            for w in (*toks, EOS):
                total += self.logprob(context, w)
                uni += self.unigram.get(w, self.unigram_unk)
                context = (*context, w)[-keep:] if keep else ()
                n += 1
        if not n:
            return math.inf, 0.0, 0
        return -total / n, (total - uni) / n, n
