"""The filter block: a document in, a drop reason (or None) out; the chain keeps the statistics.

Shaped after datatrove's pipeline blocks (one class per file, thresholds from the published
numbers, a reason on every drop), but a filter here sees one `Doc` whose word split is computed
once and shared by every filter of the chain, which is most of our speed advantage.
A filter reads its settings for the document's language (`settings_for`): the chain's numbers,
then the language's profile where the settings use profiles, then the user's `by_language`; a
check it cannot apply to a language is skipped and counted (`Doc.skip`), never turned into a drop.

Layout reasons (`review_reasons`): C4's page rules, FineWeb's line rules, Gopher's symbol, bullet
and alphabetic ratios and the repetition rules' line/paragraph counts judge how a page is laid
out, which is evidence of garbage in a web crawl but not in a source whose list pages and command
listings are its normal documents. When the chain's perplexity pass reviews layout
(`perplexity.review_layout`), such a hit flags the document (`meta.layout_flag`) instead of
removing it, and the source's own model confirms or overturns the flag (services/data_filter/fitting.py).
A rule that measures how far a document is past its limit (`Verdict.fail(reason, severity)`, a
ratio: 2.0 = twice the allowed share) removes it outright past the filter's review margin for
that rule (`review_margin`): the model's review is for layouts a rule misreads, not for documents
that fail it by a wide margin. The severity of a flag is kept in `meta.layout_severity`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from services.data_filter import languages
from services.data_filter.prose import prose_view
from shared.config.filters import FilterSettings

# Characters that may end a sentence or a "complete" line (C4 / FineWeb terminal punctuation).
TERMINAL_PUNCT = (".", "!", "?", '"', "”", "…", "。", "！", "？", "؟", "।", "॥", "'", "’")

_WORD_CHAR = re.compile(r"[^\W_]")  # a letter or a digit in any script
_LETTER = re.compile(r"[^\W\d_]")  # a letter in any script
# str.isalnum / str.isalpha answer most words exactly (their characters are all word characters /
# letters) in C; the regex decides only words mixing in punctuation or symbols
_search_word_char, _search_letter = _WORD_CHAR.search, _LETTER.search


def has_word_char(word: str) -> bool:
    """True when `word` holds a letter or digit (Gopher's "non-symbol word")."""
    return word.isalnum() or _search_word_char(word) is not None


def has_letter(word: str) -> bool:
    """True when `word` holds at least one alphabetic character (Gopher's 80% rule)."""
    return word.isalpha() or _search_letter(word) is not None


def content_words(words: list[str]) -> list[str]:
    """The words holding a letter or digit, as `has_word_char` decides, without a call per word."""
    search = _search_word_char
    return [w for w in words if w.isalnum() or search(w) is not None]


def count_letter_words(words: list[str]) -> int:
    """How many words hold a letter, as `has_letter` decides, without a call per word."""
    search = _search_letter
    return sum(1 for w in words if w.isalpha() or search(w) is not None)


@dataclass
class Doc:
    """One document moving through a chain; filters may rewrite `text` (normalisation, C4 lines)."""

    id: str
    text: str
    source: str
    kind: str = "web"
    meta: dict[str, Any] = field(default_factory=dict)
    skips: list[str] = field(default_factory=list, repr=False)
    # how far past its limit the rule behind the last flag was (`Verdict.fail`), for the chain to record
    severity: float | None = field(default=None, repr=False)
    # set when a reviewed rule failed past its margin: the chain removes instead of flagging
    past_margin: bool = field(default=False, repr=False)
    # markup kinds the language filter took out (`language.strip_markup`): prose rules judge `prose()`
    markup: tuple[str, ...] = field(default=(), repr=False)
    _words: list[str] | None = field(default=None, repr=False)
    _words_of: tuple[str, str | None] | None = field(default=None, repr=False)
    _prose: tuple[str, str, list[str] | None, str | None] | None = field(default=None, repr=False)
    _split: tuple[str, list[str]] | None = field(default=None, repr=False)

    @property
    def language(self) -> str | None:
        """The language the language filter found (None in chains without language ID)."""
        return self.meta.get("language")

    def words(self) -> list[str]:
        """Word units of the current text for its language, cached until the text or language changes."""
        lang = self.meta.get("language")
        if self._words is None or self._words_of is None or self._words_of[0] is not self.text or self._words_of[1] != lang:
            self._words = self._split_of(self.text, lang)
            self._words_of = (self.text, lang)
        return self._words

    def _split_of(self, text: str, lang: str | None) -> list[str]:
        """`languages.words(text, lang)`, through `split` where the language's word units are the whitespace split."""
        return self.split(text) if languages.splits_on_spaces(lang) else languages.words(text, lang)

    def split(self, text: str) -> list[str]:
        """`text.split()` of the document's text or prose view, remembered: the length rule, language ID
        and the word rules of most languages all start from it."""
        if self._split is None or self._split[0] is not text:
            self._split = (text, text.split())
        return self._split[1]

    def prose(self) -> str:
        """The text prose rules judge: the text itself, or its prose view when markup was named (cached)."""
        if not self.markup:
            return self.text
        if self._prose is None or self._prose[0] is not self.text:
            self._prose = (self.text, prose_view(self.text, self.markup), None, None)
        return self._prose[1]

    def prose_words(self) -> list[str]:
        """Word units of `prose()` for the document's language (`words()` when there is no markup)."""
        if not self.markup:
            return self.words()
        view, lang = self.prose(), self.meta.get("language")
        text, _, words, words_lang = self._prose
        if words is None or words_lang != lang:
            words = self._split_of(view, lang)
            self._prose = (text, view, words, lang)
        return words

    def skip(self, reason: str) -> None:
        """Record that a check did not apply (e.g. no stop-word list for this language)."""
        self.skips.append(reason)


class Filter(ABC):
    """Base class: subclasses set `name`, `reasons`, `settings` and implement `check`.

    `fitted = True` marks a filter that needs the corpus first (perplexity): the pipeline runs it
    after every streaming filter, on the documents they kept. `review_reasons` are the reasons
    that only flag a document when the chain reviews layout (see the module docstring).
    """

    name: ClassVar[str] = "filter"
    reasons: ClassVar[tuple[str, ...]] = ()
    settings: ClassVar[type[FilterSettings]] = FilterSettings
    fitted: ClassVar[bool] = False
    review_reasons: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, cfg: FilterSettings, chain: Any = None):
        self.cfg = cfg
        self.chain = chain
        self.reviewing = reviews_layout(chain)
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


def reviews_layout(chain: Any) -> bool:
    """True when the chain's perplexity pass reviews layout flags (`perplexity.review_layout`)."""
    try:
        settings = chain["perplexity"]
    except (KeyError, TypeError):
        return False
    return bool(settings.enabled and getattr(settings, "review_layout", False))


class Verdict:
    """A filter's failures in check order, for filters that mix layout and other rules.

    Without review the first failure decides (the published rule, and `fail` says stop); with
    review a layout failure is remembered and checking goes on, so a later non-layout failure
    (duplicated text after duplicated lines) still removes the document.
    """

    __slots__ = ("_doc", "_filter", "flag", "hard")

    def __init__(self, filt: Filter, doc: Doc | None = None):
        self._filter = filt
        self._doc = doc
        self.flag: str | None = None
        self.hard: str | None = None

    def fail(self, reason: str, severity: float | None = None, margin_applies: bool = True) -> bool:
        """Record a failed rule; True when checking should stop and `result` be returned.

        `severity` is how many times over its limit the document is; past the settings' margin for
        `reason` (`review_margin`) the failure removes even under review, unless the filter says the
        margin does not apply to this document (`margin_applies`: Gopher's for code, see gopher_quality.py).
        """
        if self._filter.reviewing and reason in self._filter.review_reasons:
            margin = getattr(self._filter.cfg, "review_margin", {}).get(reason) if margin_applies else None
            if severity is None or margin is None or severity <= margin:
                if self.flag is None:
                    self.flag = reason
                    if self._doc is not None:
                        self._doc.severity = None if severity is None else round(severity, 3)
                return False
            if self._doc is not None:
                self._doc.past_margin = True
        self.hard = reason
        return True

    @property
    def result(self) -> str | None:
        return self.hard or self.flag


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def over(value: float, limit: float) -> float:
    """How many times over a maximum `limit` a `value` is (inf when the limit is 0)."""
    return value / limit if limit else float("inf")


def short(value: float, least: float) -> float:
    """How far under a minimum share `least` a share `value` is, as the ratio of the shares missing
    (0.62 against 0.8: 0.38 / 0.2 = 1.9), so it reads like `over`."""
    return (1.0 - value) / (1.0 - least) if least < 1 else float("inf")
