"""The filter block: a document in, a drop reason (or None) out; the chain keeps the statistics.

Shaped after datatrove's pipeline blocks (one class per file, thresholds from the published
numbers, a reason on every drop), but a filter here sees one `Doc` whose word split is computed
once and shared by every filter of the chain, which is most of our speed advantage.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Characters that may end a sentence or a "complete" line (C4 / FineWeb terminal punctuation).
TERMINAL_PUNCT = (".", "!", "?", '"', "”", "…", "。", "！", "？", "؟", "।", "॥", "'", "’")

_WORD_CHAR = re.compile(r"[^\W_]")  # a letter or a digit in any script
_LETTER = re.compile(r"[^\W\d_]")  # a letter in any script


def has_word_char(word: str) -> bool:
    """True when `word` holds a letter or digit (Gopher's "non-symbol word")."""
    return _WORD_CHAR.search(word) is not None


def has_letter(word: str) -> bool:
    """True when `word` holds at least one alphabetic character (Gopher's 80% rule)."""
    return _LETTER.search(word) is not None


@dataclass
class Doc:
    """One document moving through a chain; filters may rewrite `text` (normalisation, C4 lines)."""

    id: str
    text: str
    source: str
    kind: str = "web"
    meta: dict[str, Any] = field(default_factory=dict)
    _words: list[str] | None = field(default=None, repr=False)
    _words_of: str | None = field(default=None, repr=False)

    def words(self) -> list[str]:
        """Whitespace-separated words of the current text, cached until the text changes."""
        if self._words is None or self._words_of is not self.text:
            self._words = self.text.split()
            self._words_of = self.text
        return self._words


class Filter(ABC):
    """Base class: subclasses set `name`, `reasons` and implement `check`."""

    name: ClassVar[str] = "filter"
    reasons: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def check(self, doc: Doc) -> str | None:
        """Return the drop reason (one of `reasons`), or None to keep `doc` (possibly rewritten)."""


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0
