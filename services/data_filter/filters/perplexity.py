"""Perplexity outliers, CCNet-style, under a model of the source's own documents.

CCNet (Wenzek et al. 2019, arXiv:1911.00359) scores each document with a per-language KenLM model
and cuts at percentiles of the perplexity distribution. No package ships such models and the
reference prose a fixed model is trained on rarely matches a source (a Python-manual model removed
90% of clean literature), so here the model comes from the source itself: for every (source,
language) group, an interpolated modified Kneser-Ney model (`lm/kneser_ney.py`, order 2 by
default) is fitted on the group's documents that passed every cheaper rule, with two-fold
cross-fitting (a document is scored by the model of the other fold, so it never scores its own
n-grams) and the cut-offs are Tukey fences at the group's own quartiles: Q3 + k IQR of log
perplexity (gibberish, mis-encoded text), optionally Q1 - k IQR (templates), and Q1 - k IQR of the
context gain, log P_ngram - log P_unigram per token (shuffled text and word salad: real words whose
neighbours say nothing about each other; absolute perplexity misses them, because a rare topic
moves a real document's perplexity as much as shuffling does). k = 1.5 (Tukey 1977).

Measured on the demo's English Wikipedia sample (601 documents, bigram, 2 folds): 0.5% of clean
documents fall below the gain fence, 99.3% of shuffled copies and 100% of i.i.d. word salad do.
A group smaller than `min_group_docs` pools with the same kind and language of other sources;
still too small, or a script without word units, it passes unscored and is counted. Deterministic:
folds by a hash of the document id, training sample in input order, fixed summation order.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter
from services.data_filter.lm.ngram import NgramModel, sentences
from shared.config.filters import PerplexityConfig

IQR_FLOOR = 0.05  # log10 units: a group whose scores barely vary does not cut on noise


def fold_of(doc_id: str) -> int:
    return hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()[0] & 1


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
    reasons = ("perplexity_too_high", "perplexity_too_low", "low_context_gain")
    settings = PerplexityConfig
    fitted = True

    def tokens(self, text: str, language: str | None) -> list[list[str]]:
        return sentences(text, language)

    def scorable(self, language: str | None) -> bool:
        return languages.measures_words(language)

    def fit(self, fold_texts: tuple[list[str], list[str]], language: str | None) -> tuple[NgramModel, NgramModel]:
        """(model scoring fold 0, model scoring fold 1): each fitted on the other fold's sample."""
        cap = self.cfg.max_fit_tokens

        def sample(texts: list[str]) -> list[list[str]]:
            out, n = [], 0
            for text in texts:
                if n >= cap:
                    break
                sents = self.tokens(text, language)
                out.extend(sents)
                n += sum(len(s) + 1 for s in sents)
            return out

        train = [sample(fold_texts[0]), sample(fold_texts[1])]
        if not train[0] or not train[1]:
            both = train[0] + train[1]
            model = NgramModel(both, self.cfg.order)
            return model, model
        return NgramModel(train[1], self.cfg.order), NgramModel(train[0], self.cfg.order)

    def fences(self, log_ppl: list[float], gain: list[float]) -> Fences:
        k = self.cfg.fence
        p1, p3 = np.percentile(np.asarray(log_ppl), [25, 75])
        g1, g3 = np.percentile(np.asarray(gain), [25, 75])
        ip, ig = max(p3 - p1, IQR_FLOOR), max(g3 - g1, IQR_FLOOR)
        return Fences(float(p3 + k * ip), float(p1 - k * ip), float(g1 - k * ig), len(log_ppl))

    def decide(self, log_ppl: float, gain: float, fences: Fences) -> str | None:
        c = self.cfg
        if c.cut_high_perplexity and log_ppl > fences.high_ppl:
            return "perplexity_too_high"
        if c.cut_low_context_gain and gain < fences.low_gain:
            return "low_context_gain"
        if c.cut_low_perplexity and log_ppl < fences.low_ppl:
            return "perplexity_too_low"
        return None

    def check(self, doc: Doc) -> str | None:
        raise RuntimeError("perplexity is fitted on the corpus: the pipeline calls fit/score/decide (services/data_filter/fitting.py)")


def score(model: NgramModel, filt: PerplexityFilter, text: str, language: str | None) -> tuple[float, float, int]:
    log_ppl, gain, n = model.score(filt.tokens(text, language))
    return (log_ppl if math.isfinite(log_ppl) else 99.0), gain, n
