"""Planted problems: documented defects mixed into the demo corpus so every filter has work to do.

Every planted record carries `meta.planted = {"problem": ..., ...}` with what a check needs (the
original it copies, the measured Jaccard, the toxic terms, the language). Filters must never read
it; tests and the demo's summary use it to measure recall. The kinds and their intended catcher:

- exact_duplicate: a verbatim copy of a real document (exact / MinHash dedup).
- near_duplicate: a copy with word substitutions until the word-5-gram Jaccard with the original
  reaches a target level (0.9, 0.8, 0.7: MinHash-LSH at the usual 0.7-0.8 threshold should catch
  them; 0.5 is a negative control that should survive).
- boilerplate: a real web document wrapped in cookie-banner / navigation / footer lines (line-level
  rules, C4-style policy lines).
- gibberish: random-letter "words", letter-scrambled real text, and mojibake (UTF-8 read as
  Latin-1) (perplexity, stop-word and alphabetic-ratio rules).
- toxic: a real document with one inserted line of LDNOOBW words in the document's language
  (word-list toxicity).
- wrong_language: non-English Debian handbook sections placed in the English Wikipedia source
  (language ID).
- too_short: a real title or heading of at most six words (length rules).
"""

from __future__ import annotations

import random
import re

from scripts.corpus.textutil import jaccard

NEAR_DUP_LEVELS = (0.9, 0.8, 0.7, 0.5)
NEAR_DUP_TOLERANCE = 0.02

BOILERPLATE_HEAD = [
    "Home | About | Blog | Contact | Privacy Policy",
    "We use cookies to improve your experience on our website. By continuing to browse, you agree to our use of cookies.",
    "Accept all cookies | Reject | Cookie settings",
    "Skip to main content",
    "Sign in | Register | My account",
]
BOILERPLATE_TAIL = [
    "Share this: Facebook | Twitter | LinkedIn | Email",
    "Subscribe to our newsletter to get the latest updates.",
    "Copyright © 2024 All rights reserved.",
    "Terms of Use | Privacy Policy | Cookie Policy | Sitemap",
    "Click here to read more.",
]
TOXIC_TEMPLATES_EN = [
    "Honestly, whoever wrote this is a {0} and a {1}.",
    "{0}! What a load of {1}.",
    "Shut up, you {0}, nobody cares about your {1}.",
]
TOXIC_TEMPLATE_OTHER = "{0}! {1}!! {0}!!!"


def _words_with_space(text: str) -> list[str]:
    return re.split(r"(\s+)", text)


def make_near_duplicate(text: str, target: float, donors: list[str], rng: random.Random) -> tuple[str, float]:
    """Substitute random words (with donor words) one at a time until Jaccard(5-gram) <= target + tol.

    Returns the edited text and its measured Jaccard with the original; raises if the target band
    [target - tol, target + tol] cannot be hit (the caller then picks a longer original).
    """
    parts = _words_with_space(text)
    word_slots = [i for i in range(0, len(parts), 2) if parts[i]]
    order = word_slots[:]
    rng.shuffle(order)
    current = text
    score = 1.0
    for slot in order:
        parts[slot] = rng.choice(donors)
        current = "".join(parts)
        score = jaccard(text, current)
        if score <= target + NEAR_DUP_TOLERANCE:
            break
    if abs(score - target) > NEAR_DUP_TOLERANCE:
        raise ValueError(f"near duplicate missed its target {target}: got {score:.3f}")
    return current, score


def add_boilerplate(text: str, rng: random.Random) -> tuple[str, list[str]]:
    """Wrap `text` in 2-3 header lines and 2-3 footer lines of site boilerplate."""
    head = rng.sample(BOILERPLATE_HEAD, rng.randint(2, 3))
    tail = rng.sample(BOILERPLATE_TAIL, rng.randint(2, 3))
    return "\n".join(head) + "\n\n" + text + "\n\n" + "\n".join(tail), head + tail


def keyboard_mash(rng: random.Random) -> str:
    """Lines of random lower-case 'words' (letters drawn uniformly, lengths 2-11)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = []
    for _ in range(rng.randint(4, 10)):
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 11))) for _ in range(rng.randint(6, 14))]
        lines.append(" ".join(words))
    return "\n".join(lines)


def scramble_letters(text: str, rng: random.Random) -> str:
    """Shuffle the letters inside every word of 4+ letters (a word reshuffled to itself is reversed)."""
    def scramble(match: re.Match) -> str:
        word = match.group(0)
        letters = list(word)
        rng.shuffle(letters)
        out = "".join(letters)
        return out if out != word else word[::-1]

    return re.sub(r"[^\W\d_]{4,}", scramble, text)


def mojibake(text: str) -> str:
    """UTF-8 bytes decoded as Latin-1: the classic encoding accident (Cyrillic → 'Ð¡Ð¾...')."""
    return text.encode("utf-8").decode("latin-1")


def toxic_line(words: list[str], lang: str, rng: random.Random) -> tuple[str, list[str]]:
    """One line built from two distinct LDNOOBW words of `lang`."""
    picked = rng.sample(sorted(set(words)), 2)
    template = rng.choice(TOXIC_TEMPLATES_EN) if lang == "en" else TOXIC_TEMPLATE_OTHER
    return template.format(*picked), picked


def insert_line(text: str, line: str, rng: random.Random) -> str:
    """Insert `line` as its own paragraph at a random paragraph boundary of `text`."""
    paragraphs = text.split("\n\n")
    at = rng.randint(1, len(paragraphs)) if len(paragraphs) > 1 else 1
    return "\n\n".join(paragraphs[:at] + [line] + paragraphs[at:])


# Lines of data/demo/bad.jsonl: (problem, raw bytes of the line). Valid records sit between them,
# so a reader must keep going after each bad line. Documented in PLANTED.md by the build.
def bad_lines(good: list[dict]) -> list[tuple[str, bytes]]:
    """The malformed-input file: every way a JSONL record can be broken, between valid records."""
    import json

    def dump(obj) -> bytes:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")

    g = [dump(r) for r in good]
    return [
        ("ok", g[0]),
        ("invalid_utf8", b'{"id": "bad-000001", "text": "caf\xe9 au lait \xff\xfe is not UTF-8", "source": "malformed", "meta": {}}'),
        ("ok", g[1]),
        ("truncated_json", g[2][: len(g[2]) // 2]),
        ("missing_text", dump({"id": "bad-000003", "source": "malformed", "meta": {}})),
        ("null_text", dump({"id": "bad-000004", "text": None, "source": "malformed", "meta": {}})),
        ("ok", g[3]),
        ("text_not_string", dump({"id": "bad-000005", "text": 42, "source": "malformed", "meta": {}})),
        ("not_an_object", dump(["bad-000006", "a JSON array is not a record"])),
        ("missing_id", dump({"text": "A record without an id cannot be traced.", "source": "malformed", "meta": {}})),
        ("trailing_garbage", dump({"id": "bad-000008", "text": "ok so far", "source": "malformed", "meta": {}}) + b" }{"),
        ("empty_text", dump({"id": "bad-000009", "text": "", "source": "malformed", "meta": {}})),
        ("nul_bytes", dump({"id": "bad-000010", "text": "nul \u0000 bytes \u0000 inside", "source": "malformed",
                            "meta": {}})),
        ("ok", g[4]),
    ]
