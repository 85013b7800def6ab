"""Length bounds on characters, whitespace words and lines: the cheapest filter, run early."""

from __future__ import annotations

from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import LengthConfig


class LengthFilter(Filter):
    name = "length"
    reasons = ("too_few_chars", "too_many_chars", "too_few_words", "too_many_words", "too_few_lines", "too_many_lines")

    def __init__(self, cfg: LengthConfig):
        self.cfg = cfg

    def check(self, doc: Doc) -> str | None:
        c = self.cfg
        n = len(doc.text)
        if n < c.min_chars:
            return "too_few_chars"
        if n > c.max_chars:
            return "too_many_chars"
        words = len(doc.words())
        if words < c.min_words:
            return "too_few_words"
        if words > c.max_words:
            return "too_many_words"
        lines = doc.text.count("\n") + 1
        if lines < c.min_lines:
            return "too_few_lines"
        if lines > c.max_lines:
            return "too_many_lines"
        return None
