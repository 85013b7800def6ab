"""Perplexity outliers, CCNet-style (Wenzek et al. 2019, arXiv:1911.00359).

A document of the LM's language is scored by a reference LM and removed when its perplexity is
outside [low cut, high cut], the cuts being percentiles of the perplexity of held-out reference
prose (`low_percentile`, `high_percentile`; the high cut times `high_margin`, an allowance for
the domain gap between the reference and the corpus). Too low catches boilerplate and repeated
templates; too high catches gibberish, word salad and mis-encoded text.
Backends: `embedded` (moelab's modified Kneser-Ney model estimated from real reference prose,
written as ARPA and queried through kenlm), `kenlm` (any ARPA/binary model by path), `causal_lm`
(a Hugging Face causal LM directory). Documents in other languages pass unscored.
"""

from __future__ import annotations

from services.data_filter.filters.base import Doc, Filter
from services.data_filter.lm.backends import make_scorer
from services.data_filter.lm.embedded import build_embedded, cutoffs, reference_perplexities
from services.data_filter.lm.reference import load_reference_lines, windows
from shared.config.filters import PerplexityConfig


class PerplexityFilter(Filter):
    name = "perplexity"
    reasons = ("perplexity_too_low", "perplexity_too_high")

    def __init__(self, cfg: PerplexityConfig):
        self.cfg = cfg
        if cfg.backend == "embedded":
            path, ref = build_embedded(cfg.reference_text, cfg.order, cfg.cache_dir)
            self.model_path = str(path)
        else:
            self.model_path = str(cfg.model_path)
            ref = reference_perplexities(cfg.backend, self.model_path, windows(load_reference_lines(cfg.reference_text))[::10])
        self.scorer = make_scorer(cfg.backend, self.model_path)
        self.low, self.high = cutoffs(ref, cfg.low_percentile, cfg.high_percentile, cfg.high_margin)

    def perplexity(self, text: str) -> float:
        return self.scorer.perplexity([line for line in text.split("\n") if line.strip()])

    def check(self, doc: Doc) -> str | None:
        lang = doc.meta.get("language")
        if lang is not None and lang != self.cfg.language:
            return None
        ppl = self.perplexity(doc.text)
        doc.meta["perplexity"] = round(ppl, 2)
        if ppl < self.low:
            return "perplexity_too_low"
        if ppl > self.high:
            return "perplexity_too_high"
        return None
