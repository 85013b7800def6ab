"""C4 line cleaning (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", section 2.2).

The published rules: keep only lines ending in a terminal punctuation mark (. ! ? ") and not in
an ellipsis; keep only lines with at least 3 words; drop lines mentioning "javascript" and lines
with cookie/terms-of-use boilerplate; drop a line holding a word over 1000 characters; drop the
whole page when it has fewer than 5 sentences, contains "lorem ipsum" or a curly bracket.
Reading (as C4's reference code, tensorflow_datasets c4_utils, and datatrove apply it): the page
rules ("lorem ipsum", "{") look at lines that passed the punctuation and length checks, so a code
line without terminal punctuation is dropped as a line rather than killing the page; Wikipedia
citation marks ([1], [edit], [citation needed]) are removed from lines. The document text is
rewritten to the surviving lines. Sentences are counted as runs of terminal punctuation followed
by whitespace or the end of the line (C4 used a sentence splitter; this is its regex reading).
"""

from __future__ import annotations

import re

from services.data_filter.filters.base import Doc, Filter
from shared.config.filters import LineRulesConfig

_END = (".", "?", "!", '"', "'")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_SENTENCE = re.compile(r"[.!?]+[\"”')\]]*(?=\s|$)")


def count_sentences(text: str) -> int:
    return len(_SENTENCE.findall(text))


class C4Filter(Filter):
    name = "c4"
    reasons = ("lorem_ipsum", "curly_bracket", "too_few_sentences")

    def __init__(self, cfg: LineRulesConfig):
        self.cfg = cfg

    def check(self, doc: Doc) -> str | None:
        c = self.cfg
        kept: list[str] = []
        sentences = 0
        for raw in doc.text.splitlines():
            line = raw.strip()
            words = line.split()
            if any(len(w) > c.c4_max_word_length for w in words):
                continue
            if "[" in line:
                line = _CITATION.sub("", line)
            if not line.endswith(_END) or line.endswith("..."):
                continue
            if len(words) < c.c4_min_words_per_line:
                continue
            low = line.lower()
            if c.c4_drop_lorem_ipsum and "lorem ipsum" in low:
                return "lorem_ipsum"
            if c.c4_drop_javascript_lines and "javascript" in low:
                continue
            if c.c4_drop_curly_bracket and "{" in line:
                return "curly_bracket"
            if c.c4_drop_policy_lines and any(p in low for p in _POLICY):
                continue
            sentences += max(1, count_sentences(line))  # a kept line is at least one sentence
            kept.append(line)
        if sentences < c.c4_min_sentences:
            return "too_few_sentences"
        cleaned = "\n".join(kept)
        if cleaned != doc.text:
            doc.text = cleaned
        return None
