"""The stand-in oracle's reference text: clean prose per language → a Kneser–Ney model and a vocabulary.

Reference documents are read from JSONL(.gz) files (default: the demo corpus's Wikipedia and
Debian-handbook sources, text that Debian/PyPI packages ship; data/demo/NOTICE), one in every
`reference_every` by a hash of the document id, so the rest stay unseen by the reference and can
test it. Records carrying a planted-problem marker (`meta.planted`, data/demo/PLANTED.md) are
skipped: a reference must be clean text. The language of each document is detected from its text
(`text_units.language`), never taken from metadata, so the oracle treats every input alike.

Per language with at least `MIN_WORDS` reference words: a Kneser–Ney trigram model, its vocabulary
(words seen twice or more), the median log2 perplexity it gives every fifth reference document,
held out of its fit (the level an unseen fluent document of that language sits at), and the
sentence-opener model of openers.py fitted on the same documents as the trigram model. Languages
without enough reference text get no model, and the signals that need one stay neutral for them (no language is penalised for lacking
a reference).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from services.scorer.oracle.kneser_ney import KneserNeyTrigram
from services.scorer.oracle.openers import OpenerModel
from services.scorer.oracle.text_units import language, sentences, words

MIN_WORDS = 3_000
HELD_OUT_EVERY = 5  # every 5th reference document measures the median, the rest fit the model
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class LanguageModel:
    lang: str
    model: KneserNeyTrigram
    median_log2_ppl: float
    words: int
    openers: OpenerModel


def in_reference(doc_id: str, every: int) -> bool:
    """Whether a document id belongs to the reference share (stable across runs and machines)."""
    return int(hashlib.sha1(str(doc_id).encode()).hexdigest()[:8], 16) % every == 0


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else REPO_ROOT / p


def read_reference(paths: tuple[str, ...], every: int) -> list[tuple[str, str]]:
    """(id, text) of the reference documents, in file order."""
    out = []
    for path in paths:
        p = _resolve(path)
        if not p.is_file():
            raise FileNotFoundError(f"scorer.oracle.heuristic.reference: {path} not found (resolved to {p})")
        with (gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")) as f:
            for line in f:
                rec = json.loads(line)
                text, meta = rec.get("text"), rec.get("meta") or {}
                if isinstance(text, str) and text.strip() and not meta.get("planted") and in_reference(rec["id"], every):
                    out.append((str(rec["id"]), text))
    return out


@lru_cache(maxsize=4)
def language_models(paths: tuple[str, ...], every: int) -> dict[str, LanguageModel]:
    """Language code → its reference model (built once per process and reference)."""
    by_lang: dict[str, list[str]] = {}
    for _, text in read_reference(paths, every):
        by_lang.setdefault(language(text), []).append(text)
    models = {}
    for lang, texts in sorted(by_lang.items()):
        sents = [[words(s) for s in sentences(t)] for t in texts]
        n_words = sum(len(w) for doc in sents for w in doc)
        if n_words < MIN_WORDS:
            continue
        held = sents[::HELD_OUT_EVERY]
        lm = KneserNeyTrigram(s for i, doc in enumerate(sents) if i % HELD_OUT_EVERY for s in doc)
        median = statistics.median(lm.log2_perplexity(doc) for doc in held)
        openers = OpenerModel.fit(t for i, t in enumerate(texts) if i % HELD_OUT_EVERY)
        models[lang] = LanguageModel(lang, lm, median, n_words, openers)
    return models
