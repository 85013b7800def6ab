"""Document statistics the heads get beside the backbone's states, computed on a document's tokens.

The backbone reads a few windows of each document (windows.py) and the Probe mean-pools them, so
two defects that a reader sees at once never reach the heads through the states alone (measured
on the pairs benchmark: Probe accuracy 0.59 on cut-off copies, 0.71 on
shuffled ones, about chance):

- `unfinished_end`: 1 when the document's last token (trailing layout marks and closing quotes or
  brackets skipped) is not a sentence end. A page cut off mid-sentence is the defect; the oracle
  rubric's coherence reads the same thing (prose_signals `unfinished`). It is the whole document's
  last token whatever the windows read.
- `sentence_cohesion`: how much more adjacent sentences share tokens than any two sentences of
  the document do, in standard deviations of the latter, over the whole document. Shuffled
  sentences bring that to about 0; clean prose sits above (lexical cohesion, Halliday & Hasan
  1976; the same measure as the stand-in oracle's `cohesion` on words, here on word-initial
  WordPiece tokens). Tokens that occur in more than half of a document's sentences are left out
  (the document's own function words), so it needs no stop-word list in any language.

- `opens_with_heading`: 1 when the document's first paragraph (up to the first blank line, read
  from the layout marks windows.py writes) is a heading: at most 12 words and no sentence end,
  with more text after it. A shuffle moves a heading into the running text and puts a body
  sentence first, which neither cohesion nor a mean-pool sees; the oracle rubric's coherence reads
  the same thing (prose_signals `titled`). Without layout marks there are no paragraphs to read
  and it is 0.

Word-initial tokens are those without WordPiece's `##` continuation prefix; a tokenizer without
that convention (byte-level BPE) has every token counted. All three are read for prose only (0 for
code, whose `.` and line ends are not sentences). They cost a pass over token ids, no backbone
compute. They are statistics of the text, not of the oracle: with an LLM oracle the heads learn
from its labels how much each one is worth.
"""

from __future__ import annotations

import math
from collections import Counter

SENTENCE_ENDS = (".", "!", "?", "。", "！", "？", "…")
CLOSERS = ('"', "'", ")", "]", "»", "”", "’", "」", "』")
MIN_SENTENCES = 4  # below this there are too few pairs to compare adjacent against all
HEADING_WORDS = 12  # a first paragraph this short without a sentence end is a heading (as the oracle's `titled`)


class TokenStats:
    """Per-tokenizer ids of sentence ends, closers and layout marks, and the three statistics."""

    def __init__(self, tokenizer, layout_marks: tuple[str, ...]) -> None:
        def ids(tokens) -> set[int]:
            unk = tokenizer.unk_token_id
            return {i for i in tokenizer.convert_tokens_to_ids(list(tokens)) if i is not None and i != unk}

        self.ends, self.closers, self.layout = ids(SENTENCE_ENDS), ids(CLOSERS), ids(layout_marks)
        self.breaks = self.ends | ids(layout_marks[:1])  # a line break also ends a heading or a list item
        self.word_start = {i for tok, i in tokenizer.get_vocab().items() if not tok.startswith("##")}
        self.words = {i for tok, i in tokenizer.get_vocab().items() if tok[:1].isalpha()}  # a word's first token
        self.newline = ids(layout_marks[:1])

    def unfinished_end(self, ids: list[int]) -> float:
        i = len(ids) - 1
        while i >= 0 and (ids[i] in self.layout or ids[i] in self.closers):
            i -= 1
        return 0.0 if i < 0 or ids[i] in self.ends else 1.0

    def opens_with_heading(self, ids: list[int]) -> float:
        body = next((k for k in range(1, len(ids) - 1) if ids[k] in self.newline and ids[k + 1] in self.newline), None)
        if body is None:
            return 0.0
        first = [t for t in ids[:body] if t not in self.layout]
        rest = any(t not in self.layout for t in ids[body:])
        short = sum(t in self.words for t in first) <= HEADING_WORDS
        # a closing quote or bracket ends it as a sentence end does (the oracle's TERMINAL has both)
        return 1.0 if first and rest and short and first[-1] not in self.ends | self.closers else 0.0

    def sentence_cohesion(self, ids: list[int]) -> float:
        sents, cur = [], set()
        for t in ids:
            if t in self.breaks:
                if cur:
                    sents.append(cur)
                cur = set()
            elif t in self.word_start:
                cur.add(t)
        if cur:
            sents.append(cur)
        if len(sents) < MIN_SENTENCES:
            return 0.0
        in_sentences = Counter(t for s in sents for t in s)
        common = {t for t, k in in_sentences.items() if k * 2 > len(sents)}
        sents = [s - common for s in sents]

        def overlap(a: set, b: set) -> float:
            return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0

        n = len(sents)
        adjacent = [overlap(sents[i], sents[i + 1]) for i in range(n - 1)]
        # all pairs is O(n^2): each sentence is compared with the next 30 (a long document's topics drift anyway)
        pairs = [overlap(sents[i], sents[j]) for i in range(n) for j in range(i + 1, min(n, i + 31))]
        mean = sum(pairs) / len(pairs)
        sd = math.sqrt(sum((p - mean) ** 2 for p in pairs) / len(pairs))
        return (sum(adjacent) / len(adjacent) - mean) / (sd + 1e-3)


def cohesion_input(cohesion: float) -> float:
    """The head input: cohesion clipped to [-2, 2] (clean prose reads about 0-1 standard deviations,
    shuffled about 0; a scale like the states' own keeps it from being learned slower than they are)."""
    return max(-2.0, min(2.0, cohesion))
