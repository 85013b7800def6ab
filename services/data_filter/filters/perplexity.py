"""Perplexity outliers, CCNet-style, under a model of the source's own documents.

CCNet (Wenzek et al. 2019, arXiv:1911.00359) scores each document with a per-language KenLM model
and cuts at percentiles of the perplexity distribution. No package ships such models and the
reference prose a fixed model is trained on rarely matches a source (a Python-manual model removed
90% of clean literature), so here the model comes from the source itself: for every (source,
language) group, an interpolated modified Kneser-Ney model (`lm/kneser_ney.py`, order 2 by
default) is fitted on the group's documents that passed every cheaper rule and dedup, with two-fold
cross-fitting (a document is scored by the model fitted on the other fold, so it never scores its
own n-grams; ten folds gave no better separation on 50-document groups at five times the cost) and
the cut-offs are Tukey fences at the group's own quartiles: Q3 + k IQR of log
perplexity (gibberish, mis-encoded text), optionally Q1 - k IQR (templates), and Q1 - k IQR of the
context gain, log P_ngram - log P_unigram per token (shuffled text and word salad: real words whose
neighbours say nothing about each other; absolute perplexity misses them, because a rare topic
moves a real document's perplexity as much as shuffling does). k = 1.5 (Tukey 1977); the quartiles
are taken after setting aside the outliers on the other side (unusually fluent documents: a few
memorised near-copies below the dedup threshold), up to three times, so they do not widen the fence.

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


def fold_of(doc_id: str, folds: int = 2) -> int:
    """The document's cross-fitting fold, from a hash of its id (stable across runs and workers)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") % folds



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

    def fences(self, log_ppl: list[float], gain: list[float]) -> Fences:
        k = self.cfg.fence
        p1, p3 = robust_quartiles(log_ppl, k, trim="low")
        g1, g3 = robust_quartiles(gain, k, trim="high")
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


def robust_quartiles(values: list[float], k: float, trim: str, rounds: int = 3) -> tuple[float, float]:
    """Q1 and Q3 after setting aside the outliers on the side opposite the cut (`trim` = "low" or "high").

    Those are the unusually fluent documents (near-copies of the other fold, templates): they must not
    widen the fence on the side that removes gibberish, shuffled text and word salad.
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


def score(model: NgramModel, filt: PerplexityFilter, text: str, language: str | None) -> tuple[float, float, int]:
    log_ppl, gain, n = model.score(filt.tokens(text, language))
    return (log_ppl if math.isfinite(log_ppl) else 99.0), gain, n
