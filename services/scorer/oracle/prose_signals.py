"""Signals of prose quality the stand-in oracle reads, each with the defect it catches.

| signal | what it measures | catches |
|---|---|---|
| `log2_ppl_excess` | Kneser–Ney log2 perplexity minus the reference's median, per language | garbled, misspelt or disordered text |
| `oov_rate` | words outside the language's reference vocabulary (seen twice or more) | unusual vocabulary (rare words, names, typos) |
| `misspelt_rate` | unknown words one edit from a known word (spelling.py) | misspellings (10% of words misspelt adds ≥ 4.5 points) |
| `cohesion` | stem overlap of adjacent sentences minus that of all sentence pairs, in standard deviations of the latter | shuffled sentence order (adjacent ≈ any pair) |
| `opener_order` | how much more its paragraph openers look like paragraph openers than its other sentence openers do, per the language's opener model (openers.py) | shuffled sentence order (a random sentence opens each paragraph) |
| `titled` | 1 when the first paragraph is a heading (≤ 12 words, no terminal punctuation) followed by body text | structure; a shuffle moves the heading into running text |
| `unfinished` | 1 when the last sentence has no terminal punctuation | a document cut off |
| `duplicate_fraction` | characters in paragraphs or sentences that occur twice or more | repeated paragraphs, copy-paste |
| `spam_density` | URLs, marketing phrases, ALL-CAPS words and "!" per 100 words | spam and boilerplate inserted |
| word/sentence shape | alphabetic and symbol ratios, words per sentence, word length, distinct words | the Gopher/C4-style basics |

Language-dependent signals (`log2_ppl_excess`, `oov_rate`, `opener_order`) are 0 for languages without a
reference model (reference.py), so those languages are judged on the others alone; `misspelt_rate`
then uses the document's own repeated words as its only vocabulary.

`general_scores` maps them to the rubric as a grader's deductions: a base level per dimension from
the document's shape, capped to the scale, minus points for each defect found (`DEDUCTIONS`).
Why deductions after the cap: a defect then costs its points whatever the base, instead of
vanishing when a strong document sits above the top of the scale, and each defect's weight is
set so that the strength `degrade.py` plants costs at least one whole point in nine documents of
ten (measured on held-aside documents): the oracle's labels are integers, and a
defect worth less than a point would tie most documents with their damaged copies.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from services.scorer.oracle.reference import LanguageModel
from services.scorer.oracle.spelling import misspelt_rate
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
    misspelt_rate: float
    cohesion: float
    opener_order: float
    titled: float
    unfinished: float
    duplicate_fraction: float
    spam_density: float

    @property
    def untitled(self) -> float:
        return 1.0 - self.titled


def _stems(sentence: str) -> set[str]:
    """Content words of a sentence cut to 6 characters (a crude stem that matches inflections)."""
    return {w[:6] for w in words(sentence) if len(w) >= 4 or not w.isascii()}


def cohesion(sents: list[str]) -> float:
    """How much more adjacent sentences share stems than sentence pairs do on average, in standard
    deviations of the pairs' overlap (0 for a random order; a lexical-chain measure of local
    coherence in the spirit of Barzilay & Lapata's entity grid, without parsing).

    Overlap of two sentences = shared stems ÷ the smaller sentence's stems. Fewer than 4 sentences
    with content words: 0 (not enough pairs to compare).
    """
    sets = [s for s in (_stems(x) for x in sents) if s]
    if len(sets) < 4:
        return 0.0

    def overlap(a: set, b: set) -> float:
        return len(a & b) / min(len(a), len(b))

    adjacent = [overlap(a, b) for a, b in zip(sets, sets[1:], strict=False)]
    pairs = [overlap(sets[i], sets[j]) for i in range(len(sets)) for j in range(i + 1, len(sets))]
    mean = sum(pairs) / len(pairs)
    sd = math.sqrt(sum((p - mean) ** 2 for p in pairs) / len(pairs))
    return (sum(adjacent) / len(adjacent) - mean) / (sd + 1e-3)


def titled(text: str) -> float:
    """1 when the document opens with a heading: a first paragraph of ≤ 12 words without terminal
    punctuation, followed by more text."""
    paras = paragraphs(text)
    return float(len(paras) >= 2 and len(paras[0].split()) <= 12 and not paras[0].endswith(TERMINAL))


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
    vocab = lm.model.vocab if lm is not None else frozenset()
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
        misspelt_rate=misspelt_rate(ws, vocab),
        cohesion=cohesion(sents),
        opener_order=lm.openers.order_signal(text) if lm is not None else 0.0,
        titled=titled(text),
        unfinished=0.0 if not tail or tail.endswith(TERMINAL) else 1.0,
        duplicate_fraction=duplicate_fraction(text),
        spam_density=100 * spam / n,
    )


def general_scores(s: ProseSignals) -> dict[str, float]:
    """The general rubric's five 0-4 dimensions as continuous values (the oracle rounds them):
    base level capped to [0, 4] minus the defects' deductions (module docstring)."""
    log_n = math.log10(max(1, s.n_words * (1 - s.duplicate_fraction)))
    base = {
        "helpfulness": 6 * s.alpha - 40 * s.symbols + 1.2 * log_n - 2.8,
        "correctness": 4.5 - 60 * s.symbols - 3 * max(0.0, 0.45 - s.distinct) - 0.5 * max(0.0, s.log2_ppl_excess),
        "coherence": 4.2 - abs(s.words_per_sentence - 18) / 9,
        "complexity": 1.6 * (s.mean_word - 3.6) + 10 * s.long_words - 0.5 - 2 * s.oov_rate,
        "verbosity": 1.6 * log_n - 1.0,
    }
    found = {d: sum(w * getattr(s, signal) for signal, w in DEDUCTIONS[d]) for d in base}
    order = s.cohesion + OPENER_WEIGHT * s.opener_order
    found["coherence"] += INCOHERENCE_POINTS * max(0.0, COHESION_EXPECTED - order)
    return {d: min(4.0, max(0.0, base[d])) - found[d] for d in base}


# Sentence order is read as cohesion + OPENER_WEIGHT × opener_order: the two err on different
# documents, and on held-aside clean documents and their shuffles the sum ranks more pairs right
# than either alone.
OPENER_WEIGHT = 0.5
COHESION_EXPECTED = 0.9  # ≈ the 70th percentile of clean documents; a shuffled one sits near 0
INCOHERENCE_POINTS = 1.5  # per unit of that order reading missing below that
# Points per unit of each defect signal, per dimension. Measured on held-aside clean documents and
# their degraded copies (10th percentile of the signal's change): a 10% misspelling rate adds
# ≥ 0.045 to misspelt_rate (×25 ≥ 1.1 points); 3 spam lines add ≥ 3.8 to spam_density (×0.3);
# a repeated paragraph adds ≥ 0.12 to duplicate_fraction (×9); a cut adds 1 to unfinished; a
# shuffle removes the heading (titled 1 → 0) and most of the cohesion.
DEDUCTIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "helpfulness": (("spam_density", 0.3), ("unfinished", 1.0), ("duplicate_fraction", 3.0)),
    "correctness": (("misspelt_rate", 25.0), ("spam_density", 0.1)),
    "coherence": (("unfinished", 1.2), ("duplicate_fraction", 4.0), ("spam_density", 0.1), ("untitled", 0.8)),
    "complexity": (("misspelt_rate", 10.0),),
    "verbosity": (("duplicate_fraction", 9.0),),
}
