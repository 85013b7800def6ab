"""What the filters know about a language: its profile (stop words, thresholds) and its word units.

Profiles are `resources/languages/<lang>.json`, derived from FineWeb-2's published per-language
configs (see PROVENANCE.md there): stop words and word-length bounds for 31 languages, plus
repetition thresholds for languages written without spaces.

Word units: whitespace words for languages written with spaces. For Chinese every Han character
is a unit (a Chinese word averages ~1.5 characters, and FineWeb-2's Chinese bounds are 1-5); for
Japanese, runs of one character class (kanji, hiragana, katakana, Latin, digits) are units, the
rough segmentation TinySegmenter's character-type features start from; Latin words and digits
inside either stay whole. Thai, Lao, Khmer, Myanmar and Tibetan have no segmenter here, so the
rules that measure words (`WORDLESS`) skip them and count the skip instead of removing them.
For languages without spaces, stop words match as substrings, since no unit boundary is reliable.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

RESOURCES = Path(__file__).resolve().parent / "resources" / "languages"
HAN_UNITS = frozenset({"zh", "wuu", "yue", "gan"})
CLASS_RUN_UNITS = frozenset({"ja"})
WORDLESS = frozenset({"th", "lo", "km", "my", "bo"})
NO_SPACES = HAN_UNITS | CLASS_RUN_UNITS | WORDLESS

_HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_UNIT = re.compile(rf"[{_HAN}]|[^\s{_HAN}]+")
_JA_UNIT = re.compile(
    rf"[{_HAN}々〆ヵヶ]+|[\u3041-\u309f]+|[\u30a0-\u30ffー\uff66-\uff9f]+|[A-Za-z\uff21-\uff5a]+|[0-9\uff10-\uff19]+"
    rf"|[^\s{_HAN}\u3041-\u30ff\uff66-\uff9fA-Za-z0-9\uff10-\uff19]+"
)


@functools.lru_cache(maxsize=256)
def profile(language: str | None) -> dict[str, Any]:
    """The language's profile (empty for English, unknown languages and None)."""
    if not language or not re.fullmatch(r"[a-z_]{2,12}", language):
        return {}
    path = RESOURCES / f"{language}.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    for section in data.values():  # JSON object keys are strings; n-gram tables are keyed by int
        if isinstance(section, dict):
            for key in ("top_ngram_max_frac", "dup_ngram_max_frac"):
                if key in section:
                    section[key] = {int(n): f for n, f in section[key].items()}
    return data


def profile_section(language: str | None, section: str) -> dict[str, Any]:
    return dict(profile(language).get(section, {}))


_WORDISH = re.compile(r"[^\W_]")


def _attach_punctuation(units: list[str]) -> list[str]:
    """Punctuation-only units join the unit before them, as whitespace words carry their punctuation."""
    out: list[str] = []
    for u in units:
        if out and not _WORDISH.search(u):
            out[-1] += u
        else:
            out.append(u)
    return out


def words(text: str, language: str | None) -> list[str]:
    """The word units the length, Gopher and repetition rules count for `language`."""
    if language in HAN_UNITS:
        return _attach_punctuation(_HAN_UNIT.findall(text))
    if language in CLASS_RUN_UNITS:
        return _attach_punctuation(_JA_UNIT.findall(text))
    return text.split()


def splits_on_spaces(language: str | None) -> bool:
    """Whether `words(text, language)` is `text.split()`."""
    return language not in HAN_UNITS and language not in CLASS_RUN_UNITS


def has_spaces(language: str | None) -> bool:
    return language not in NO_SPACES


def measures_words(language: str | None) -> bool:
    """False where no segmenter gives word units (word-count and word-length rules skip these)."""
    return language not in WORDLESS
