"""The filter block: a document in, a drop reason (or None) out; the chain keeps the statistics.

Shaped after datatrove's pipeline blocks (one class per file, thresholds from the published
numbers, a reason on every drop), but a filter here sees one `Doc` whose word split is computed
once and shared by every filter of the chain, which is most of our speed advantage.
A filter reads its settings for the document's language (`settings_for`): the chain's numbers,
then the language's profile where the settings use profiles, then the user's `by_language`; a
check it cannot apply to a language is skipped and counted (`Doc.skip`), never turned into a drop.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from services.data_filter import languages
from shared.config.filters import FilterSettings

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
    skips: list[str] = field(default_factory=list, repr=False)
    _words: list[str] | None = field(default=None, repr=False)
    _words_of: tuple[str, str | None] | None = field(default=None, repr=False)

    @property
    def language(self) -> str | None:
        """The language the language filter found (None in chains without language ID)."""
        return self.meta.get("language")

    def words(self) -> list[str]:
        """Word units of the current text for its language, cached until the text or language changes."""
        lang = self.meta.get("language")
        if self._words is None or self._words_of is None or self._words_of[0] is not self.text or self._words_of[1] != lang:
            self._words = languages.words(self.text, lang)
            self._words_of = (self.text, lang)
        return self._words

    def skip(self, reason: str) -> None:
        """Record that a check did not apply (e.g. no stop-word list for this language)."""
        self.skips.append(reason)


class Filter(ABC):
    """Base class: subclasses set `name`, `reasons`, `settings` and implement `check`.

    `fitted = True` marks a filter that needs the corpus first (perplexity): the pipeline runs it
    after every streaming filter, on the documents they kept.
    """

    name: ClassVar[str] = "filter"
    reasons: ClassVar[tuple[str, ...]] = ()
    settings: ClassVar[type[FilterSettings]] = FilterSettings
    fitted: ClassVar[bool] = False

    def __init__(self, cfg: FilterSettings, chain: Any = None):
        self.cfg = cfg
        self.chain = chain
        self._per_language: dict[str | None, Any] = {}

    def settings_for(self, doc: Doc) -> Any:
        """This filter's settings for the document's language (cached per language)."""
        lang = doc.meta.get("language")
        try:
            return self._per_language[lang]
        except KeyError:
            use_profile = getattr(self.cfg, "language_profiles", False)
            prof = languages.profile_section(lang, self.name) if use_profile else {}
            found = self._per_language[lang] = self.cfg.for_language(lang, prof)
            return found

    @abstractmethod
    def check(self, doc: Doc) -> str | None:
        """Return the drop reason (one of `reasons`), or None to keep `doc` (possibly rewritten)."""


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0
