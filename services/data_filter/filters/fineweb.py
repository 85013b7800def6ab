"""FineWeb document line rules (Penedo et al. 2024, "The FineWeb Datasets", arXiv:2406.17557).

Published thresholds (the config defaults), over the non-blank lines of a document: remove it
when fewer than 12% of lines end in terminal punctuation, when more than 67% of lines are 30
characters or shorter, when characters in duplicated lines exceed 1% of all characters, or when
there are more than 0.3 newlines per word (list-like pages).
Languages: FineWeb-2's settings outside English (duplicated-line characters up to 10%, no
short-line rule; Chinese, Japanese and Thai line-punctuation thresholds) come from the language
profiles; the newline-per-word rule is skipped and counted where no word segmenter exists.
"""

from __future__ import annotations

from services.data_filter import languages
from services.data_filter.filters.base import TERMINAL_PUNCT, Doc, Filter
from services.data_filter.filters.repetition import duplicates
from shared.config.filters import FineWebConfig


class FineWebFilter(Filter):
    name = "fineweb"
    reasons = ("line_punct_ratio", "short_line_ratio", "dup_line_char_ratio", "newline_ratio")
    review_reasons = frozenset(reasons)  # every one judges line layout (lists, listings, short lines)

    settings = FineWebConfig

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        lines = [line for line in doc.text.split("\n") if line.strip()]
        if not lines:
            return "line_punct_ratio"
        ends = sum(1 for line in lines if line.endswith(TERMINAL_PUNCT))
        if ends / len(lines) < c.min_line_punct_ratio:
            return "line_punct_ratio"
        short = sum(1 for line in lines if len(line) <= c.short_line_chars)
        if short / len(lines) > c.max_short_line_ratio:
            return "short_line_ratio"
        _, dup_chars = duplicates(lines)
        total = len(doc.text.replace("\n", ""))
        if total and dup_chars / total > c.max_dup_line_char_ratio:
            return "dup_line_char_ratio"
        if not languages.measures_words(doc.language):
            doc.skip(f"newline_ratio_no_segmenter:{doc.language}")
            return None
        words = len(doc.words())
        if words and doc.text.count("\n") / words > c.max_newline_ratio:
            return "newline_ratio"
        return None
