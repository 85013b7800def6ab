"""Length bounds on characters, words and lines: the cheapest filter, run early.

Words are the document language's word units (whitespace words; characters or character-class
runs for Chinese and Japanese); for scripts with no segmenter here the word bounds are skipped
and counted, not applied to whitespace-separated phrases.
"""

from __future__ import annotations

from services.data_filter import languages
from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import LengthConfig


class LengthFilter(Filter):
    name = "length"
    reasons = ("too_few_chars", "too_many_chars", "too_few_words", "too_many_words", "too_few_lines", "too_many_lines")

    settings = LengthConfig

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        n = len(doc.text)
        if n < c.min_chars:
            return "too_few_chars"
        if n > c.max_chars:
            return "too_many_chars"
        if languages.measures_words(doc.language):
            words = len(doc.words())
            if words < c.min_words:
                return "too_few_words"
            if words > c.max_words:
                return "too_many_words"
        elif c.min_words > 0 or c.max_words < 200_000:
            doc.skip(f"word_bounds_no_segmenter:{doc.language}")
        lines = doc.text.count("\n") + 1
        if lines < c.min_lines:
            return "too_few_lines"
        if lines > c.max_lines:
            return "too_many_lines"
        return None
