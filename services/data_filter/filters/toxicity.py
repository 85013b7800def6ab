"""Toxicity by word lists, per language, plus an optional English classifier.

Lists: the LDNOOBW "List of Dirty, Naughty, Obscene, and Otherwise Bad Words" (vendored from the
npm package `naughty-words` 1.2.0 into resources/ldnoobw/, CC-BY-4.0) for 27 languages, minus the
entries whose ordinary sense is common in clean text (resources/toxicity_exclusions/: sex, rape,
penis, ass, burro, pesce, ...), because scripture, literature, medicine and news use them and a
word with an ordinary sense is no evidence. `better-profanity`'s English list (MIT) can be added
(`use_better_profanity`); it is off by default because it lists god, hell, kill and the like.
The document's language comes from the language filter (`doc.meta["language"]`), else the
chain's first kept language. A document is removed when it has at least `min_hits` listed words
and they exceed `max_ratio` of its words (a ratio, as Dolma's and C4's badword filters suggest,
so one stray word in a long page passes; 3 hits and 2% remove a page at 5% profane tokens).
Single words match whole lower-cased tokens (surrounding punctuation stripped); multi-word entries
match as phrases; in languages written without spaces (ja, zh, th, ko) non-Latin entries match
as substrings and Latin ones as whole words. Languages without a list are skipped and counted.
Optional: `alt-profanity-check` (a linear SVM over TF-IDF, English) with a probability threshold.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import ToxicityConfig

RESOURCES = Path(__file__).resolve().parents[1] / "resources" / "ldnoobw"
EXCLUSIONS = Path(__file__).resolve().parents[1] / "resources" / "toxicity_exclusions"
_NO_SPACES = {"ja", "zh", "th", "ko"}
_TOKEN = re.compile(r"\w+")


def _entries(path: Path) -> set[str]:
    return {w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}


@functools.lru_cache(maxsize=8)
def load_lists(lists_dir: str, better_profanity: bool, exclusions_dir: str | None = None
               ) -> dict[str, tuple[frozenset[str], re.Pattern | None]]:
    """language -> (single words, regex of phrases/substrings or None), exclusions removed."""
    folder = Path(lists_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"toxicity.lists_dir {folder} is not a directory of <lang>.txt word lists")
    skip_dir = Path(exclusions_dir) if exclusions_dir else None
    if skip_dir is not None and not skip_dir.is_dir():
        raise FileNotFoundError(f"toxicity.exclusions_dir {skip_dir} is not a directory of <lang>.txt word lists")
    out = {}
    for path in sorted(folder.glob("*.txt")):
        if path.stem.upper() == "LICENSE":
            continue
        entries = _entries(path)
        if path.stem == "en" and better_profanity:
            entries |= _better_profanity_words()
        if skip_dir is not None and (skip_dir / path.name).is_file():
            entries -= _entries(skip_dir / path.name)
        out[path.stem] = _compile(path.stem, entries)
    return out


def _better_profanity_words() -> set[str]:
    import better_profanity

    path = Path(better_profanity.__file__).parent / "profanity_wordlist.txt"
    return {w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}


def _compile(lang: str, entries: set[str]) -> tuple[frozenset[str], re.Pattern | None]:
    if lang in _NO_SPACES:
        singles, phrases = set(), {e for e in entries if not e.isascii()}
        words = entries - phrases
    else:  # entries that are one \w+ token match as tokens; the rest (phrases, g-spot, s&m) as patterns
        singles = {e for e in entries if _TOKEN.fullmatch(e)}
        phrases, words = set(), entries - singles
    alts = []
    if phrases:
        alts.append("|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True)))
    if words:
        alts.append(r"(?<!\w)(?:" + "|".join(re.escape(p) for p in sorted(words, key=len, reverse=True)) + r")(?!\w)")
    return frozenset(singles), re.compile("|".join(alts)) if alts else None


class ToxicityFilter(Filter):
    name = "toxicity"
    reasons = ("word_list_ratio", "classifier")

    settings = ToxicityConfig

    def __init__(self, cfg: ToxicityConfig, chain=None):
        super().__init__(cfg, chain)
        exclusions = cfg.exclusions_dir or (None if cfg.lists_dir else str(EXCLUSIONS))
        self.lists = load_lists(str(cfg.lists_dir or RESOURCES), cfg.use_better_profanity, exclusions)
        language = chain["language"] if chain is not None else None
        self.default_language = language.languages[0] if language is not None and language.enabled else "en"
        self._clf = None
        if cfg.classifier:
            from profanity_check import predict_prob  # alt-profanity-check

            self._clf = predict_prob

    def hits(self, doc: Doc, lang: str) -> int:
        entry = self.lists.get(lang)
        if entry is None:
            return 0
        singles, pattern = entry
        low = doc.text.lower()
        n = 0
        if singles:  # word tokens counted in C (Counter), then looked up once per distinct token
            counts = Counter(_TOKEN.findall(low))
            n += sum(c for w, c in counts.items() if w in singles)
        if pattern is not None:
            n += len(pattern.findall(low))
        return n

    def check(self, doc: Doc) -> str | None:
        lang = doc.meta.get("language", self.default_language)
        c = self.settings_for(doc)
        if lang not in self.lists:
            doc.skip(f"no_word_list_for:{lang}")
        else:
            hits = self.hits(doc, lang)
            words = max(len(doc.words()), 1)
            if hits >= c.min_hits and hits / words > c.max_ratio:
                return "word_list_ratio"
        if self._clf is not None and lang == "en" and float(self._clf([doc.text])[0]) > c.classifier_threshold:
            return "classifier"
        return None
