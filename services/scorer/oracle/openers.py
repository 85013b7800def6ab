"""Where a sentence's first word belongs: at the start of a paragraph or inside one.

Writers open a paragraph with a topic ("The dam ...", "Debian ...") and continue it with words that
point back ("It", "This", "However", "Dort", "Cependant"). A model of that, per language, is two
counts over clean reference text: how often each word opens a paragraph's first sentence, and how
often it opens a later one. `order_signal` scores a document by how much more paragraph-like its
paragraph openers are than its other sentence openers (mean smoothed log-odds, initial minus
later). A shuffle that keeps the paragraph sizes puts random sentences at paragraph starts, so the
signal falls to about 0; in clean text it sits well above. It is a second, independent view of
sentence order beside lexical cohesion (prose_signals.cohesion), whose errors it does not share:
cohesion reads which sentences are neighbours, this reads which sentence comes first.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from services.scorer.oracle.text_units import paragraphs, sentences, words


def sentence_openers(text: str) -> list[tuple[bool, str]]:
    """(is the paragraph's first sentence, its first word) for each sentence that has a word."""
    out = []
    for para in paragraphs(text):
        for k, sentence in enumerate(sentences(para)):
            ws = words(sentence)
            if ws:
                out.append((k == 0, ws[0]))
    return out


@dataclass(frozen=True)
class OpenerModel:
    initial: Counter
    later: Counter

    @classmethod
    def fit(cls, texts) -> OpenerModel:
        initial, later = Counter(), Counter()
        for text in texts:
            for first, word in sentence_openers(text):
                (initial if first else later)[word] += 1
        return cls(initial, later)

    def log_odds(self, word: str) -> float:
        """log P(word | opens a paragraph) − log P(word | opens a later sentence), add-½ smoothed:
        > 0 for topic openers, < 0 for words that point back, 0 for words never seen."""
        n_initial, n_later = sum(self.initial.values()), sum(self.later.values())
        return (math.log((self.initial[word] + 0.5) / (n_initial + 0.5))
                - math.log((self.later[word] + 0.5) / (n_later + 0.5)))

    def order_signal(self, text: str) -> float:
        """Mean log-odds of the paragraph openers minus that of the other sentence openers; 0 with
        fewer than two of either (too few to compare)."""
        pairs = sentence_openers(text)
        first = [self.log_odds(w) for is_first, w in pairs if is_first]
        rest = [self.log_odds(w) for is_first, w in pairs if not is_first]
        if len(first) < 2 or len(rest) < 2:
            return 0.0
        return sum(first) / len(first) - sum(rest) / len(rest)
