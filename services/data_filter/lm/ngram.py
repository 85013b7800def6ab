"""Score text under an estimated Kneser-Ney model in memory, plus the unigram model of the same text.

Why in memory: the perplexity filter fits two small models per (source, language) on every run, so
writing ARPA and loading it into KenLM would cost more than the scoring; the lookups here follow
ARPA's back-off rule exactly (a test checks them against KenLM on the same ARPA file). Tokens are
`tokenize_for(language)`: CCNet's normalisation (lower case, digits to 0, punctuation split) on the
language's word units, so Chinese and Japanese are modelled on characters / character-class runs.
The unigram model (maximum likelihood, add-1/2 smoothing) is what the "context gain" compares to:
log10 P_ngram - log10 P_unigram per token, near 0 for shuffled text and word salad, whose words are
real but whose neighbours say nothing about each other.

Speed: a model keeps its bigram level as sorted integer keys (previous id x vocabulary + id), so a
document is scored with one `searchsorted` over its token pairs instead of a dictionary lookup per
token; `encode` keeps which word unit every token belongs to, which is what the word-order test
(`lm/word_order.py`) permutes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count, repeat

import numpy as np

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


_SPACED_TOKEN = re.compile(r"(\s*)(\w+|[^\w\s])")


def token_stream(text: str, language: str | None) -> tuple[list[str], list[bool], list[bool]]:
    """The tokens of `sentences(text)` in one list, with whether each starts a word unit and a line."""
    if languages.has_spaces(language):
        found = _SPACED_TOKEN.findall(_DIGIT.sub("0", text.lower()))  # (whitespace before, token): one C-level pass
        toks = [t for _, t in found]
        unit_start = [bool(ws) for ws, _ in found]
        line_start = ["\n" in ws for ws, _ in found]
    else:
        toks, unit_start, line_start = [], [], []
        for line in text.split("\n"):
            first = True
            for unit in languages.words(_DIGIT.sub("0", line.lower()), language):
                for k, tok in enumerate(_PUNCT_SPLIT.findall(unit) if not unit.isalnum() else (unit,)):
                    toks.append(tok)
                    unit_start.append(k == 0)
                    line_start.append(first)
                    first = False
    if toks:
        unit_start[0] = line_start[0] = True
    return toks, unit_start, line_start


@dataclass(frozen=True)
class Encoded:
    """A document as token ids: `prev`/`cur` are its scored pairs (<s> before each line, </s> after)."""

    prev: np.ndarray
    cur: np.ndarray
    unit_first: np.ndarray  # per word unit: id of its first token
    unit_last: np.ndarray  # per word unit: id of its last token
    line_of_unit: np.ndarray  # per word unit: its line index
    own_first: np.ndarray  # the same, numbered within the document (words the model never saw stay distinct)
    own_last: np.ndarray

    @property
    def tokens(self) -> int:
        return len(self.cur)


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
        self._index()

    def _index(self) -> None:
        """Integer ids (0 = unknown) and the unigram/bigram levels as arrays, for vectorised scoring."""
        uni = self.table[1]
        words = sorted(g[0] for g in uni if g[0] != UNK)
        self.ids = {w: i + 1 for i, w in enumerate(words)}
        v = self.vocab_size = len(words) + 1
        self.p1 = np.full(v, self.unk)
        self.bo1 = np.zeros(v)
        self.u1 = np.full(v, self.unigram_unk)
        for w, i in self.ids.items():
            self.p1[i], self.bo1[i] = uni[(w,)]
            self.u1[i] = self.unigram.get(w, self.unigram_unk)
        pairs = [(self.ids[a] * v + self.ids[b], lp) for (a, b), (lp, _) in self.table[2].items()]
        pairs.sort()
        self.keys2 = np.array([k for k, _ in pairs], dtype=np.int64)
        self.p2 = np.array([p for _, p in pairs], dtype=np.float64)

    def encode(self, text: str, language: str | None) -> Encoded:
        """Token ids of `text` in scoring order (<s> and </s> around every line), with its word units."""
        toks, unit_start, line_start = token_stream(text, language)
        if not toks:
            empty = np.zeros(0, dtype=np.int64)
            return Encoded(empty, empty, empty, empty, empty, empty, empty)
        tok_ids = np.fromiter(map(self.ids.get, toks, repeat(0)), dtype=np.int64, count=len(toks))
        own: dict[str, int] = {}  # a token's first position: equal tokens, equal ids
        own_ids = np.fromiter(map(own.setdefault, toks, count()), dtype=np.int64, count=len(toks))
        starts = np.asarray(line_start, dtype=bool)
        units = np.asarray(unit_start, dtype=bool)
        line = np.cumsum(starts) - 1
        ends = np.append(starts[1:], True)  # the last token of each line
        cur = np.insert(tok_ids, np.flatnonzero(ends) + 1, self.ids[EOS])
        prev = np.roll(cur, 1)
        prev[np.flatnonzero(starts) + line[starts]] = self.ids[BOS]  # each earlier line added one </s>
        unit_ends = np.append(units[1:], True)
        return Encoded(prev, cur, tok_ids[units], tok_ids[unit_ends], line[units], own_ids[units], own_ids[unit_ends])

    def bigram_logprob(self, prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
        """log10 P(cur | prev) under the model's bigram level, elementwise (ARPA back-off)."""
        keys = prev * self.vocab_size + cur
        at = np.searchsorted(self.keys2, keys)
        at[at == len(self.keys2)] = 0
        found = (self.keys2[at] == keys) if len(self.keys2) else np.zeros(len(keys), dtype=bool)
        return np.where(found, self.p2[at] if len(self.p2) else 0.0, self.bo1[prev] + self.p1[cur])

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

    def score_encoded(self, enc: Encoded) -> tuple[float, float, int]:
        """(log10 perplexity, context gain per token, tokens) of an encoded document (bigram models)."""
        n = enc.tokens
        if not n:
            return math.inf, 0.0, 0
        total = float(self.bigram_logprob(enc.prev, enc.cur).sum())
        uni = float(self.u1[enc.cur].sum())
        return -total / n, (total - uni) / n, n

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
