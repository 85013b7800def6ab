"""FineWeb document line rules (Penedo et al. 2024, "The FineWeb Datasets", arXiv:2406.17557).

Published thresholds (the config defaults), over the non-blank lines of a document: remove it
when fewer than 12% of lines end in terminal punctuation, when more than 67% of lines are 30
characters or shorter, when characters in duplicated lines exceed 1% of all characters, or when
there are more than 0.3 newlines per word (list-like pages).
Languages: FineWeb-2's settings outside English (duplicated-line characters up to 10%, no
short-line rule; Chinese, Japanese and Thai line-punctuation thresholds) come from the language
profiles; the newline-per-word rule is skipped and counted where no word segmenter exists.
Under layout review each rule records how far the document failed it (`over`/`short`), and the
short-line, duplicated-line and newline rules remove past their `review_margin`. The punctuated-line
minimum has no margin: its far end, no line ending in punctuation, is what a table or a listing reads as.
"""

from __future__ import annotations

from services.data_filter import languages
from services.data_filter.filters.base import TERMINAL_PUNCT, Doc, Filter, Verdict, over, short
from services.data_filter.filters.repetition import duplicates
from shared.config.filters import FineWebConfig


class FineWebFilter(Filter):
    name = "fineweb"
    reasons = ("line_punct_ratio", "short_line_ratio", "dup_line_char_ratio", "newline_ratio")
    review_reasons = frozenset(reasons)  # every one judges line layout (lists, listings, short lines)

    settings = FineWebConfig

    def check(self, doc: Doc) -> str | None:
        c = self.settings_for(doc)
        lines = [line for line in doc.text.split("\n") if line.strip()]
        if not lines:
            return "line_punct_ratio"
        v = Verdict(self, doc)  # under review a layout failure flags and the checks go on: a later one may be past its margin
        ends = sum(1 for line in lines if line.endswith(TERMINAL_PUNCT)) / len(lines)
        if ends < c.min_line_punct_ratio and v.fail("line_punct_ratio", short(ends, c.min_line_punct_ratio)):
            return v.result
        short_lines = sum(1 for line in lines if len(line) <= c.short_line_chars) / len(lines)
        if short_lines > c.max_short_line_ratio and v.fail("short_line_ratio", over(short_lines, c.max_short_line_ratio)):
            return v.result
        _, dup_chars = duplicates(lines)
        total = len(doc.text.replace("\n", ""))
        dup_share = dup_chars / total if total else 0.0
        if dup_share > c.max_dup_line_char_ratio and v.fail("dup_line_char_ratio", over(dup_share, c.max_dup_line_char_ratio)):
            return v.result
        if not languages.measures_words(doc.language):
            doc.skip(f"newline_ratio_no_segmenter:{doc.language}")
            return v.result
        words = len(doc.words())
        per_word = doc.text.count("\n") / words if words else 0.0
        if per_word > c.max_newline_ratio and v.fail("newline_ratio", over(per_word, c.max_newline_ratio)):
            return v.result
        return v.result
