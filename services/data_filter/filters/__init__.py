"""One filter per file; `build_chain` turns a `ChainConfig` into the ordered list of enabled filters."""

from __future__ import annotations

from services.data_filter.filters.base import Doc, Filter
from services.data_filter.filters.c4 import C4Filter
from services.data_filter.filters.code import CodeFilter
from services.data_filter.filters.fineweb import FineWebFilter
from services.data_filter.filters.gopher_quality import GopherQualityFilter
from services.data_filter.filters.language import LanguageFilter
from services.data_filter.filters.length import LengthFilter
from services.data_filter.filters.normalize import NormalizeFilter
from services.data_filter.filters.repetition import RepetitionFilter
from services.data_filter.filters.toxicity import ToxicityFilter
from shared.config.filters import ChainConfig

__all__ = ["Doc", "Filter", "build_chain"]


def build_chain(cfg: ChainConfig) -> list[Filter]:
    """Enabled filters, cheapest first; rewriting filters (normalise, C4) run before what they affect.

    Order: normalize, length, language, code, repetition, gopher_quality, c4, fineweb, toxicity,
    perplexity (FineWeb's order for the shared part: language, Gopher repetition, Gopher quality, C4,
    FineWeb rules).
    """
    chain: list[Filter] = []
    if cfg.normalize.enabled:
        chain.append(NormalizeFilter(cfg.normalize))
    if cfg.length.enabled:
        chain.append(LengthFilter(cfg.length))
    if cfg.language.enabled:
        chain.append(LanguageFilter(cfg.language))
    if cfg.code.enabled:
        chain.append(CodeFilter(cfg.code))
    if cfg.repetition.enabled:
        chain.append(RepetitionFilter(cfg.repetition))
    if cfg.gopher_quality.enabled:
        chain.append(GopherQualityFilter(cfg.gopher_quality))
    if cfg.line_rules.enabled and cfg.line_rules.c4:
        chain.append(C4Filter(cfg.line_rules))
    if cfg.line_rules.enabled and cfg.line_rules.fineweb:
        chain.append(FineWebFilter(cfg.line_rules))
    if cfg.toxicity.enabled:
        chain.append(ToxicityFilter(cfg.toxicity, default_language=cfg.language.languages[0]))
    if cfg.perplexity.enabled:
        from services.data_filter.filters.perplexity import PerplexityFilter

        chain.append(PerplexityFilter(cfg.perplexity))
    return chain
