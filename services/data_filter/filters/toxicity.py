"""Toxicity by word lists, per language, plus an optional English classifier.

Lists: the LDNOOBW "List of Dirty, Naughty, Obscene, and Otherwise Bad Words" (vendored from the
npm package `naughty-words` 1.2.0 into resources/ldnoobw/, CC-BY-4.0) for 27 languages, and
`better-profanity`'s English list (MIT) added to English. The document's language comes from the
language filter (`doc.meta["language"]`), else the first kept language of the chain. A document
is removed when it has at least `min_hits` listed words and they exceed `max_ratio` of its words
(a ratio, as Dolma's and C4's badword filters suggest, so one stray word in a long page passes).
Single words match whole lower-cased tokens (surrounding punctuation stripped); multi-word entries
and languages written without spaces (ja, zh, th, ko) match as substrings.
Optional: `alt-profanity-check` (a linear SVM over TF-IDF, English) with a probability threshold.
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path

from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import ToxicityConfig

RESOURCES = Path(__file__).resolve().parents[1] / "resources" / "ldnoobw"
_NO_SPACES = {"ja", "zh", "th", "ko"}
_STRIP = string.punctuation + "“”‘’«»„…—–"


@functools.lru_cache(maxsize=8)
def load_lists(lists_dir: str, better_profanity: bool) -> dict[str, tuple[frozenset[str], re.Pattern | None]]:
    """language -> (single words, regex of phrases/substrings or None)."""
    folder = Path(lists_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"toxicity.lists_dir {folder} is not a directory of <lang>.txt word lists")
    out = {}
    for path in sorted(folder.glob("*.txt")):
        if path.stem.upper() == "LICENSE":
            continue
        entries = {w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}
        if path.stem == "en" and better_profanity:
            entries |= _better_profanity_words()
        out[path.stem] = _compile(path.stem, entries)
    return out


def _better_profanity_words() -> set[str]:
    import better_profanity

    path = Path(better_profanity.__file__).parent / "profanity_wordlist.txt"
    return {w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}


def _compile(lang: str, entries: set[str]) -> tuple[frozenset[str], re.Pattern | None]:
    if lang in _NO_SPACES:
        singles, phrases = set(), entries
    else:
        singles = {e for e in entries if " " not in e}
        phrases = entries - singles
    pattern = None
    if phrases:
        alts = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
        pattern = re.compile(alts if lang in _NO_SPACES else rf"(?<!\w)(?:{alts})(?!\w)")
    return frozenset(singles), pattern


class ToxicityFilter(Filter):
    name = "toxicity"
    reasons = ("word_list_ratio", "classifier")

    def __init__(self, cfg: ToxicityConfig, default_language: str = "en"):
        self.cfg = cfg
        self.lists = load_lists(str(cfg.lists_dir or RESOURCES), cfg.use_better_profanity)
        self.default_language = default_language
        self._clf = None
        if cfg.classifier:
            from profanity_check import predict_prob  # alt-profanity-check

            self._clf = predict_prob

    def hits(self, doc: Doc, lang: str) -> int:
        entry = self.lists.get(lang)
        if entry is None:
            return 0
        singles, pattern = entry
        n = 0
        if singles:
            for w in doc.words():
                low = w.lower()
                if low in singles or low.strip(_STRIP) in singles:
                    n += 1
        if pattern is not None:
            n += len(pattern.findall(doc.text.lower()))
        return n

    def check(self, doc: Doc) -> str | None:
        lang = doc.meta.get("language", self.default_language)
        hits = self.hits(doc, lang)
        words = max(len(doc.words()), 1)
        if hits >= self.cfg.min_hits and hits / words > self.cfg.max_ratio:
            return "word_list_ratio"
        if self._clf is not None and lang == "en" and float(self._clf([doc.text])[0]) > self.cfg.classifier_threshold:
            return "classifier"
        return None
