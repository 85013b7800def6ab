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
from pathlib import Path
from typing import NamedTuple

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
               ) -> dict[str, WordList]:
    """language -> its compiled list (single words, regex of phrases/substrings), exclusions removed."""
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


class WordList(NamedTuple):
    """One language's list, compiled: tokens looked up in a set, the rest matched by regexes.

    `pattern` matches the entries holding a word token (phrases, "g-spot", "s&m"). Every `\\w+`
    run of such an entry is bounded by the entry's own non-word characters or by the pattern's
    `(?<!\\w)`/`(?!\\w)`, so where the entry matches, the text's tokens include all its runs.
    `gates` maps each entry's longest run to the run sets of the entries it leads ("girls" ->
    {two, girls, one, cup}): a document whose tokens hold no entry's whole run set cannot match,
    and `pattern` (an alternation tried at every position, most of this filter's time) is not run
    on it. `loose` matches the entries without a token (an emoji), run only when one occurs as a
    substring; their characters appear in no other entry, so the two never overlap and their
    counts add up to what one alternation counts. `gates` is None (run `pattern` always) for
    scripts without spaces or when that condition fails.
    """

    singles: frozenset[str]
    pattern: re.Pattern | None
    gates: dict[str, tuple[frozenset[str], ...]] | None
    loose: tuple[re.Pattern, tuple[str, ...]] | None

    def may_match(self, tokens: set[str]) -> bool:
        """False when `pattern` cannot match a text with these tokens (see the class docstring)."""
        if self.gates is None:
            return True
        return any(runs <= tokens for lead in self.gates.keys() & tokens for runs in self.gates[lead])


def _gates(entries: set[str]) -> dict[str, tuple[frozenset[str], ...]]:
    out: dict[str, list[frozenset[str]]] = {}
    for e in entries:
        runs = _TOKEN.findall(e)
        out.setdefault(max(runs, key=len), []).append(frozenset(runs))
    return {lead: tuple(sets) for lead, sets in out.items()}


def _alternation(entries: set[str], bounded: bool) -> str:
    alts = "|".join(re.escape(p) for p in sorted(entries, key=len, reverse=True))
    return r"(?<!\w)(?:" + alts + r")(?!\w)" if bounded else alts


def _compile(lang: str, entries: set[str]) -> WordList:
    if lang in _NO_SPACES:
        phrases = {e for e in entries if not e.isascii()}
        alts = [_alternation(group, bounded) for group, bounded in ((phrases, False), (entries - phrases, True)) if group]
        return WordList(frozenset(), re.compile("|".join(alts)) if alts else None, None, None)
    # entries that are one \w+ token match as tokens; the rest (phrases, g-spot, s&m) as patterns
    singles = {e for e in entries if _TOKEN.fullmatch(e)}
    words = entries - singles
    loose = {e for e in words if not _TOKEN.search(e)}
    anchored = words - loose
    shared = {ch for e in loose for ch in e} & {ch for e in anchored for ch in e}
    if shared:  # a loose entry could overlap an anchored one: one alternation, always run
        return WordList(frozenset(singles), re.compile(_alternation(words, True)) if words else None, None, None)
    return WordList(frozenset(singles), re.compile(_alternation(anchored, True)) if anchored else None, _gates(anchored),
                    (re.compile(_alternation(loose, True)), tuple(loose)) if loose else None)


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
        singles, pattern, _, loose = entry
        low = doc.text.lower()
        n = 0
        tokens = _TOKEN.findall(low) if singles or entry.gates is not None else []
        present = set(tokens)
        if singles:  # the list's words among the tokens, found by a set intersection in C, counted only when present
            found = singles & present
            if found:
                n += sum(map(tokens.count, found))
        if pattern is not None and entry.may_match(present):
            n += len(pattern.findall(low))
        if loose is not None and any(e in low for e in loose[1]):
            n += len(loose[0].findall(low))
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
