"""Signals of prose quality the stand-in oracle reads, each with the defect it catches.

| signal | what it measures | catches |
|---|---|---|
| `log2_ppl_excess` | Kneser–Ney log2 perplexity minus the reference's median, per language | garbled, misspelt or disordered text |
| `oov_rate` | words outside the language's reference vocabulary (seen twice or more) | misspellings (a 10% typo rate adds ≈ 7–9 points) |
| `cohesion` | content-word overlap of adjacent sentences minus that of sentences ≥ 2 apart | shuffled sentence order (adjacent ≈ distant) |
| `unfinished` | 1 when the last sentence has no terminal punctuation | a document cut off |
| `duplicate_fraction` | characters in paragraphs or sentences that occur twice or more | repeated paragraphs, copy-paste |
| `spam_density` | URLs, marketing phrases, ALL-CAPS words and "!" per 100 words | spam and boilerplate inserted |
| word/sentence shape | alphabetic and symbol ratios, words per sentence, word length, distinct words | the Gopher/C4-style basics |

Language-dependent signals (`log2_ppl_excess`, `oov_rate`) are 0 for languages without a
reference model (reference.py), so those languages are judged on the others alone.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from services.scorer.oracle.reference import LanguageModel
from services.scorer.oracle.text_units import TERMINAL, language, paragraphs, sentences, words

_URL = re.compile(r"https?://|www\.", re.I)
_SPAM = re.compile(
    r"click here|buy now|order now|act now|free shipping|limited (?:time )?offer|subscribe|discount|"
    r"casino|viagra|winner|earn \$|100% free|best price|cheap|jetzt kaufen|gratuit|gratis|cliquez ici|haga clic",
    re.I,
)
_CAPS = re.compile(r"\b[A-Z]{3,}\b")


@dataclass(frozen=True)
class ProseSignals:
    n_words: int
    alpha: float
    symbols: float
    words_per_sentence: float
    mean_word: float
    distinct: float
    long_words: float
    log2_ppl_excess: float
    oov_rate: float
    cohesion: float
    unfinished: float
    duplicate_fraction: float
    spam_density: float


def _content(sentence: str) -> set[str]:
    return {w for w in words(sentence) if len(w) >= 4 or not w.isascii()}


def cohesion(sents: list[str]) -> float:
    """Mean overlap coefficient of adjacent sentences minus that of sentences two or more apart."""
    sets = [_content(s) for s in sents]
    sets = [s for s in sets if s]
    if len(sets) < 4:
        return 0.0

    def overlap(a: set, b: set) -> float:
        return len(a & b) / min(len(a), len(b))

    adjacent = [overlap(a, b) for a, b in zip(sets, sets[1:], strict=False)]
    distant = [overlap(sets[i], sets[j]) for i in range(len(sets)) for j in range(i + 2, len(sets))]
    return sum(adjacent) / len(adjacent) - sum(distant) / len(distant)


def duplicate_fraction(text: str) -> float:
    """Characters in repeated copies of paragraphs, or of sentences (≥ 30 characters), ÷ all characters:
    the larger of the two (Gopher's duplicate-paragraph and duplicate-line fractions, by characters)."""
    worst = 0
    for units in (paragraphs(text), sentences(text)):
        counts = Counter(u for u in units if len(u) >= 30)
        worst = max(worst, sum(len(u) * (c - 1) for u, c in counts.items() if c > 1))
    return min(1.0, worst / max(1, len(text)))


def prose_signals(text: str, models: dict[str, LanguageModel]) -> ProseSignals:
    ws = words(text)
    n = max(1, len(ws))
    chars = max(1, len(text))
    sents = sentences(text)
    lm = models.get(language(text))
    if lm is not None and ws:
        excess = lm.model.log2_perplexity(words(s) for s in sents) - lm.median_log2_ppl
        oov = sum(w not in lm.model.vocab for w in ws) / n
    else:
        excess, oov = 0.0, 0.0
    tail = text.rstrip()
    spam = len(_URL.findall(text)) + 2 * len(_SPAM.findall(text)) + len(_CAPS.findall(text)) + text.count("!")
    return ProseSignals(
        n_words=len(ws),
        alpha=sum(c.isalpha() for c in text) / chars,
        symbols=sum(c in "{}[]<>=_|\\/#*$@~^`" for c in text) / chars,
        words_per_sentence=n / max(1, len(sents)),
        mean_word=sum(map(len, ws)) / n,
        distinct=len(set(ws)) / n,
        long_words=sum(len(w) >= 8 for w in ws) / n,
        log2_ppl_excess=excess,
        oov_rate=oov,
        cohesion=cohesion(sents),
        unfinished=0.0 if not tail or tail.endswith(TERMINAL) else 1.0,
        duplicate_fraction=duplicate_fraction(text),
        spam_density=100 * spam / n,
    )


def general_scores(s: ProseSignals) -> dict[str, float]:
    """The general rubric's five 0-4 dimensions as continuous values (the oracle rounds them)."""
    log_n = math.log10(max(1, s.n_words * (1 - s.duplicate_fraction)))
    return {
        "helpfulness": 6 * s.alpha - 40 * s.symbols + 1.2 * log_n - 3.2 - 0.25 * s.spam_density
        - 3 * s.duplicate_fraction - 0.8 * s.unfinished,
        "correctness": 4.5 - 60 * s.symbols - 3 * max(0.0, 0.45 - s.distinct) - 14 * s.oov_rate
        - 0.5 * max(0.0, s.log2_ppl_excess),
        "coherence": 3.2 - abs(s.words_per_sentence - 18) / 9 + 10 * s.cohesion - 1.5 * s.unfinished
        - 4 * s.duplicate_fraction - 0.1 * s.spam_density,
        "complexity": 1.6 * (s.mean_word - 3.6) + 10 * s.long_words - 0.5 - 4 * s.oov_rate,
        "verbosity": 1.6 * log_n - 1.0 - 2 * s.duplicate_fraction,
    }
