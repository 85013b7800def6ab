"""Perplexity outliers, CCNet-style, and a word-order test, under a model of the source's own documents.

CCNet (Wenzek et al. 2019, arXiv:1911.00359) scores each document with a per-language KenLM model
and cuts at percentiles of the perplexity distribution. No package ships such models and the
reference prose a fixed model is trained on rarely matches a source (a Python-manual model removed
90% of clean literature), so here the model comes from the source itself: for every (source,
language) group, an interpolated modified Kneser-Ney model (`lm/kneser_ney.py`, order 2 by
default) is fitted on the group's documents that passed every cheaper rule and dedup, with two-fold
cross-fitting (a document is scored by the model fitted on the other fold, so it never scores its
own n-grams; ten folds gave no better separation on 50-document groups at five times the cost).
Two cuts, each from the group's own documents:

- `no_word_order`: a permutation test (`lm/word_order.py`): the document's bigram log-probability
  against the same words in up to 64 random orders; z < 3 means the model cannot tell its order from
  random. Shuffled text, word salad and gibberish (all out-of-vocabulary: nothing to order) fall
  there, whatever the group's size; real text of every layout (prose, lists, listings) does not.
- `perplexity_too_high`: log perplexity above Q3 + k IQR of the group (k = 3, Tukey's "far out";
  k = 1.5 removed 1-2 clean listing pages in each 40-document handbook locale), the quartiles taken
  after setting aside unusually fluent outliers (memorised near-copies below the dedup threshold).
  Optional: `perplexity_too_low` (templates) and the former context-gain fence (`low_context_gain`,
  log P_bigram - log P_unigram per token below Q1 - k IQR), which the word-order test replaces.

The same model reviews layout flags (`review_layout`, see filters/base.py): a flagged document is
kept only when it passes both tests as well, has at least `min_doc_tokens` tokens and its group has
a model; otherwise it is removed with its layout rule's reason. A group smaller than
`min_group_docs` pools with the same kind and language of other sources; a pool still below it
gets the word-order test alone (it needs a model, not quartiles) from `min_order_docs` (6)
documents with text in both folds; smaller, or a script without word units, it passes unscored
and is counted. Deterministic: folds and
permutations from a hash of the document id, training sample in input order, fixed summation order.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter
from services.data_filter.lm.ngram import NgramModel, sentences
from services.data_filter.lm.word_order import order_z
from shared.config.filters import PerplexityConfig

IQR_FLOOR = 0.05  # log10 units: a group whose scores barely vary does not cut on noise


def fold_of(doc_id: str, folds: int = 2) -> int:
    """The document's cross-fitting fold, from a hash of its id (stable across runs and workers)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") % folds


class Score(NamedTuple):
    """One document under its group's model: log10 perplexity, context gain, tokens, word-order z."""

    log_ppl: float
    gain: float
    tokens: int
    order_z: float


@dataclass(frozen=True)
class Fences:
    """Cut-offs of one group, from its own out-of-fold scores."""

    high_ppl: float
    low_ppl: float
    low_gain: float
    docs: int

    def to_dict(self) -> dict[str, float]:
        return {"high_log10_ppl": self.high_ppl, "low_log10_ppl": self.low_ppl, "low_gain": self.low_gain, "docs": self.docs}

    @classmethod
    def from_dict(cls, d: dict[str, float]) -> Fences:
        return cls(d["high_log10_ppl"], d["low_log10_ppl"], d["low_gain"], int(d["docs"]))


class PerplexityFilter(Filter):
    name = "perplexity"
    reasons = ("no_word_order", "perplexity_too_high", "low_context_gain", "perplexity_too_low")
    settings = PerplexityConfig
    fitted = True

    def tokens(self, text: str, language: str | None) -> list[list[str]]:
        return sentences(text, language)

    def scorable(self, language: str | None) -> bool:
        return languages.measures_words(language)

    def fit(self, fold_texts: list[list[str]], language: str | None) -> list[NgramModel]:
        """One model per fold, each fitted on the other folds' samples (all of them when only one fold has text)."""
        cap = self.cfg.max_fit_tokens // max(len(fold_texts) - 1, 1)
        sents: list[list[list[str]]] = []
        for texts in fold_texts:
            out, n = [], 0
            for text in texts:
                if n >= cap:
                    break
                doc = self.tokens(text, language)
                out.extend(doc)
                n += sum(len(s) + 1 for s in doc)
            sents.append(out)
        if sum(1 for s in sents if s) < 2:
            model = NgramModel([s for fold in sents for s in fold], self.cfg.order)
            return [model] * len(fold_texts)
        return [NgramModel([s for g, fold in enumerate(sents) if g != f for s in fold], self.cfg.order)
                for f in range(len(fold_texts))]

    def score(self, model: NgramModel, doc_id: str, text: str, language: str | None) -> Score:
        """The document's scores; the word-order test uses the model's bigram level at any order."""
        enc = model.encode(text, language)
        log_ppl, gain, n = model.score_encoded(enc) if model.order == 2 else model.score(self.tokens(text, language))
        z = order_z(model, enc, doc_id, self.cfg.order_permutations, self.cfg.max_order_units)
        return Score(log_ppl if math.isfinite(log_ppl) else 99.0, gain, n, z)

    def fences(self, log_ppl: list[float], gain: list[float]) -> Fences:
        k = self.cfg.fence
        p1, p3 = robust_quartiles(log_ppl, k, trim="low")
        g1, g3 = robust_quartiles(gain, k, trim="high")
        ip, ig = max(p3 - p1, IQR_FLOOR), max(g3 - g1, IQR_FLOOR)
        return Fences(float(p3 + k * ip), float(p1 - k * ip), float(g1 - k * ig), len(log_ppl))

    def decide(self, s: Score, fences: Fences | None) -> str | None:
        """The reason to remove a scored document, or None (an untestable word order passes).

        `fences` is None for a group too small for quartiles: only the word-order test applies.
        """
        c = self.cfg
        if c.cut_no_word_order and s.order_z < c.min_order_z:  # nan (too few units to move) compares False
            return "no_word_order"
        if fences is None:
            return None
        if c.cut_high_perplexity and s.log_ppl > fences.high_ppl:
            return "perplexity_too_high"
        if c.cut_low_context_gain and s.gain < fences.low_gain:
            return "low_context_gain"
        if c.cut_low_perplexity and s.log_ppl < fences.low_ppl:
            return "perplexity_too_low"
        return None

    def vouches(self, s: Score) -> bool:
        """Does the group's model vouch for a layout-flagged document, i.e. is it real text (its word order shows)?

        The perplexity fence is not asked: a listing, a shell session or a page quoting another
        language is atypical of the source by construction (that is why a layout rule fired), and
        its perplexity is high for the same reason (a Portuguese handbook page with an English
        session: log10 perplexity 3.34 against the group's fence of 3.16).
        """
        return s.tokens >= self.cfg.min_doc_tokens and s.order_z >= self.cfg.min_order_z

    def check(self, doc: Doc) -> str | None:
        raise RuntimeError("perplexity is fitted on the corpus: the pipeline calls fit/score/decide (services/data_filter/fitting.py)")


def robust_quartiles(values: list[float], k: float, trim: str, rounds: int = 3) -> tuple[float, float]:
    """Q1 and Q3 after setting aside the outliers on the side opposite the cut (`trim` = "low" or "high").

    Those are the unusually fluent documents (near-copies of the other fold, templates): they must not
    widen the fence on the side that removes gibberish and mis-encoded text.
    """
    v = np.asarray(values, dtype=float)
    for _ in range(rounds):
        q1, q3 = np.percentile(v, [25, 75])
        iqr = max(q3 - q1, IQR_FLOOR)
        inside = v[v <= q3 + k * iqr] if trim == "high" else v[v >= q1 - k * iqr]
        if len(inside) == len(v) or len(inside) < 8:
            break
        v = inside
    q1, q3 = np.percentile(v, [25, 75])
    return float(q1), float(q3)
