"""Documents built to sit at a filter threshold's edge: real words from the manual pages, counted exactly."""

from __future__ import annotations

from services.data_filter.filters.base import Doc
from tests.services.data_filter import realtext

WORDS = [w.strip(".,:;()\"'*") for w in realtext.manual_words()]
WORDS = [w for w in WORDS if w.isalpha() and 3 <= len(w) <= 9]


def doc(text: str, **meta) -> Doc:
    return Doc("d", text, "test", "web", dict(meta))


def words(n: int, start: int = 0) -> list[str]:
    """n distinct-looking real words (cycling through the manual's vocabulary from `start`)."""
    return [WORDS[(start + i) % len(WORDS)] for i in range(n)]
