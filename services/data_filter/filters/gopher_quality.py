"""Gopher quality rules (Rae et al. 2021, "Scaling Language Models", arXiv:2112.11446, A.1.1).

Published thresholds (the config defaults): keep documents with 50-100,000 words, a mean word
length of 3-10 characters, a symbol-to-word ratio <= 0.1 for '#' and for ellipses, <= 90% of
lines starting with a bullet, <= 30% of lines ending with an ellipsis, >= 80% of words containing
an alphabetic character, and at least 2 of the stop words "the, be, to, of, and, that, have, with".

Words are whitespace-separated tokens. Word counts and the mean length use "non-symbol" words
(those holding a letter or digit), as datatrove reads the rule; stop words are matched after
lower-casing and stripping surrounding punctuation ("The," counts as "the").

Languages: the stop words and word-length bounds are the document language's (FineWeb-2's
per-language lists and bounds, resources/languages/; Gopher's eight and 3-10 for English). A
language with no stop-word list skips that rule (counted, never removed for lacking English
words); languages written without spaces match their stop words as substrings and count word
units (characters, character-class runs); where no segmenter exists, the word-count and
word-length rules are skipped and counted too.
"""

from __future__ import annotations

import re
import string

from services.data_filter import languages
from services.data_filter.filters.base import (
    Doc,
    Filter,
    Verdict,
    content_words,
    count_letter_words,
    over,
    short,
)
from shared.config.filters import GopherQualityConfig

_STRIP = string.punctuation + "“”‘’«»„…—–"
_BULLETS = ("•", "-")
# a line that opens, closes or ends a statement as code does: `{`, `}`, `;` or `\` at its end, a closing
# bracket at its start, or a shell block word (then/do/fi/done/esac/else) alone
_CODE_LINE = re.compile(r"[{};\\]\s*$|^\s*[})\]]|^\s*(?:then|do|fi|done|esac|else)\s*$")


def code_line_share(text: str) -> float:
    """Share of non-blank lines laid out as code. Prose, hard-wrapped or not, ends its lines in words
    and punctuation: 0-0.04 on the clean and planted prose of benchmarks/review_margin.py, 0.12-0.9
    on the code files the margins removed there, 0.09 on a handbook page quoting a policy file."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return sum(1 for ln in lines if _CODE_LINE.search(ln)) / len(lines) if lines else 0.0


class GopherQualityFilter(Filter):
    name = "gopher_quality"
    reasons = (
        "too_few_words", "too_many_words", "mean_word_length_low", "mean_word_length_high",
        "too_many_hashes", "too_many_ellipses", "too_many_bullet_lines", "too_many_ellipsis_lines",
        "too_few_alpha_words", "too_few_stop_words",
    )
    # layout: symbols, bullets and digits (command listings, filmographies); word counts, word
    # lengths and stop words stay removals
    review_reasons = frozenset({"too_many_hashes", "too_many_ellipses", "too_many_bullet_lines", "too_many_ellipsis_lines",
                                "too_few_alpha_words"})

    settings = GopherQualityConfig

    def __init__(self, cfg: GopherQualityConfig, chain=None):
        super().__init__(cfg, chain)
        self._stop_sets: dict[int, frozenset[str]] = {}

    def _stop_words(self, c: GopherQualityConfig, lang: str | None) -> frozenset[str] | None:
        """The stop words for `lang`, or None when the language has no list."""
        own = c is not self.cfg or not c.language_profiles  # a profile or an override supplied them
        if lang not in (None, "en") and not own and "stop_words" not in self.cfg.by_language.get(lang, {}):
            return None
        key = id(c)
        if key not in self._stop_sets:
            self._stop_sets[key] = frozenset(w.lower() for w in c.stop_words)
        return self._stop_sets[key]

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        lang = doc.language
        text = doc.prose()
        words = doc.prose_words()
        n_words = len(words)
        # with markup stripped the length counts the whole document (formulas, examples are content), and
        # the prose statistics (word length, stop words) need at least as much prose as Gopher's rules saw
        prose_judged = not doc.markup or n_words >= c.min_prose_words
        if not prose_judged:
            doc.skip("prose_too_short")
        if languages.measures_words(lang):
            content = content_words(words)
            n_length = len(content_words(doc.words())) if doc.markup else len(content)
            if n_length < c.min_words:
                return "too_few_words"
            if n_length > c.max_words:
                return "too_many_words"
            if content and prose_judged:
                mean_len = sum(map(len, content)) / len(content)
                if mean_len < c.min_mean_word_length:
                    return "mean_word_length_low"
                if mean_len > c.max_mean_word_length:
                    return "mean_word_length_high"
        else:
            doc.skip(f"word_rules_no_segmenter:{lang}")
        if n_words == 0:
            return None if doc.markup else "too_few_words"
        v = Verdict(self, doc)
        prose_shaped: list[bool] = []

        def fail(reason: str, severity: float) -> bool:
            if not prose_shaped:  # measured once, and only for a document that fails a layout rule
                prose_shaped.append(code_line_share(text) <= c.margin_code_lines)
            return v.fail(reason, severity, margin_applies=prose_shaped[0])

        hashes = text.count("#") / n_words
        if hashes > c.max_symbol_word_ratio and fail("too_many_hashes", over(hashes, c.max_symbol_word_ratio)):
            return v.result
        dots = (text.count("...") + text.count("…")) / n_words
        if dots > c.max_symbol_word_ratio and fail("too_many_ellipses", over(dots, c.max_symbol_word_ratio)):
            return v.result
        lines = text.splitlines() or [""]
        bullets = sum(1 for line in lines if line.lstrip().startswith(_BULLETS)) / len(lines)
        if bullets > c.max_bullet_lines_ratio and fail("too_many_bullet_lines", over(bullets, c.max_bullet_lines_ratio)):
            return v.result
        ellipsis = sum(1 for line in lines if line.rstrip().endswith(("...", "…"))) / len(lines)
        if ellipsis > c.max_ellipsis_lines_ratio and fail("too_many_ellipsis_lines", over(ellipsis, c.max_ellipsis_lines_ratio)):
            return v.result
        alpha = count_letter_words(words) / n_words
        if alpha < c.min_alpha_words_ratio and fail("too_few_alpha_words", short(alpha, c.min_alpha_words_ratio)):
            return v.result
        if c.min_stop_words and prose_judged:
            stop = self._stop_words(c, lang)
            if stop is None:
                doc.skip(f"no_stop_words_for:{lang}")
            elif count_stop_words(words, text, stop, c.min_stop_words, languages.has_spaces(lang)) < c.min_stop_words:
                return "too_few_stop_words"
        return v.result


def count_stop_words(words: list[str], text: str, stop: frozenset[str], enough: int, spaced: bool) -> int:
    """Distinct stop words present (stopping at `enough`): whole words, or substrings without spaces."""
    if not spaced:
        low = text.lower()
        return sum(1 for w in stop if w in low)
    found: set[str] = set()
    for w in words:
        low = w.lower()
        if low in stop or low.strip(_STRIP) in stop:
            found.add(low.strip(_STRIP))
            if len(found) >= enough:
                break
    return len(found)
