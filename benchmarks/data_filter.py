"""Data filter throughput and keep-decision agreement against datatrove, measured in one run.

The same filters (Gopher repetition, Gopher quality, C4 line rules, FineWeb line rules, in that
order, with the same published thresholds) run on the same real-text corpus through moelab's
chain and through datatrove's filter blocks (`BaseFilter.run`, datatrove's own execution path
minus disk I/O), single-process and with 2 worker processes. Both sides split words on
whitespace (datatrove gets a whitespace `WordTokenizer` with the same sentence rule, so the rules
are compared, not the tokenizers; its default English tokenizer needs NLTK data, which is not
installed here). Language ID is not in the shared set: datatrove's fastText filter downloads its
own model.

Corpus: the Python reference manual (`pydoc_data.topics`, prose with code blocks and grammar)
cut into documents, module docstrings of the standard library, and degraded copies of both
(repeated lines, bullet lists, truncated text) so every rule fires.

Last line: JSON with `ratio` (our docs/s per core over datatrove's, single process),
`ratio_2workers`, `agreement` (fraction of documents with the same keep decision) and the raw
numbers. Run: `.venv/bin/python benchmarks/data_filter.py [--quick]`.
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing as mp
import random
import sys
import sysconfig
import time
from pathlib import Path

# run as a script, sys.path[0] is benchmarks/, whose tokenize.py would shadow the stdlib module
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))


def build_corpus(n_docs: int, seed: int = 0) -> list[tuple[str, str]]:
    """(id, text) pairs of real text and degraded copies, deterministic."""
    import pydoc_data.topics as topics

    base: list[str] = []
    for key in sorted(topics.topics):
        lines = topics.topics[key].split("\n")
        for i in range(0, len(lines), 40):
            chunk = "\n".join(lines[i : i + 40]).strip()
            if chunk:
                base.append(chunk)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if doc:
            base.append(doc)
    rng = random.Random(seed)
    docs: list[str] = []
    while len(docs) < n_docs:
        text = base[len(docs) % len(base)]
        variant = (len(docs) // len(base)) % 4
        lines = text.split("\n")
        if variant == 1:  # repeated lines
            text = "\n".join(lines + rng.sample(lines, k=min(len(lines), 1 + len(lines) // 3)))
        elif variant == 2:  # a bullet list
            text = "\n".join(f"- {line}" if line.strip() else line for line in lines)
        elif variant == 3:  # truncated
            text = "\n".join(lines[: max(1, len(lines) // 3)])
        docs.append(text)
    return [(f"d{i}", t) for i, t in enumerate(docs)]


# moelab side ------------------------------------------------------------------------------------

def ours_filters():
    from services.data_filter.filters.c4 import C4Filter
    from services.data_filter.filters.fineweb import FineWebFilter
    from services.data_filter.filters.gopher_quality import GopherQualityFilter
    from services.data_filter.filters.repetition import RepetitionFilter
    from shared.config.filters import GopherQualityConfig, LineRulesConfig, RepetitionConfig

    lines = LineRulesConfig()
    return [RepetitionFilter(RepetitionConfig()), GopherQualityFilter(GopherQualityConfig()), C4Filter(lines), FineWebFilter(lines)]


def ours_keep(docs: list[tuple[str, str]]) -> list[str]:
    from services.data_filter.accounting import Chain
    from services.data_filter.filters.base import Doc

    chain = Chain(ours_filters())
    return [i for i, text in docs if chain.run(Doc(i, text, "bench")) is None]


# datatrove side ---------------------------------------------------------------------------------

def datatrove_filters():
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.utils.word_tokenizers import WordTokenizer

    from services.data_filter.filters.base import TERMINAL_PUNCT
    from services.data_filter.filters.c4 import _SENTENCE

    class Whitespace(WordTokenizer):
        """Whitespace words and the same sentence rule as moelab's C4 filter."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            spans = self.span_tokenize(text)
            return [text[a:b] for a, b in spans] or [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            out, start = [], 0
            for m in _SENTENCE.finditer(text):
                out.append((start, m.end()))
                start = m.end()
            return out

    tok = Whitespace("en")
    return [
        GopherRepetitionFilter(language=tok),
        GopherQualityFilter(language=tok),
        C4QualityFilter(language=tok, min_num_sentences=5, min_words_per_line=3),
        FineWebQualityFilter(language=tok, stop_chars=TERMINAL_PUNCT),
    ]


def datatrove_keep(docs: list[tuple[str, str]]) -> list[str]:
    from datatrove.data import Document

    stream = (Document(text=t, id=i) for i, t in docs)
    for f in datatrove_filters():
        stream = f.run(stream, rank=0, world_size=1)
    return [d.id for d in stream]


# harness ----------------------------------------------------------------------------------------

def _time(fn, docs, workers: int, pool=None) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    if workers <= 1:
        kept = fn(docs)
    else:
        parts = [docs[i::workers] for i in range(workers)]
        kept = [k for part in pool.map(fn, parts) for k in part]
    return time.perf_counter() - t0, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small corpus, one repeat (a smoke run)")
    ap.add_argument("--docs", type=int, default=None, help="corpus size (default 6000, quick 800)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats, best kept (default 3, quick 1)")
    args = ap.parse_args()
    n = args.docs or (800 if args.quick else 6000)
    repeats = args.repeats or (1 if args.quick else 3)
    docs = build_corpus(n)
    chars = sum(len(t) for _, t in docs)
    print(f"corpus: {len(docs)} documents, {chars / 1e6:.1f} M characters (real text + degraded copies)")
    import logging

    from loguru import logger

    logger.remove()  # datatrove logs every block's start; keep the output readable
    logging.getLogger().setLevel(logging.WARNING)

    results = {}
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        pool.map(len, [[1], [2]])  # start the workers before timing
        for name, fn in (("ours", ours_keep), ("datatrove", datatrove_keep)):
            for workers in (1, 2):
                best, kept = min((_time(fn, docs, workers, pool) for _ in range(repeats)), key=lambda r: r[0])
                results[(name, workers)] = (len(docs) / best, set(kept))
                print(f"{name:9s} workers={workers}: {len(docs) / best:9.1f} docs/s  "
                      f"({len(docs) / best / workers:8.1f} per core), kept {len(kept)}")
    ours_kept = results[("ours", 1)][1]
    dt_kept = results[("datatrove", 1)][1]
    ids = [i for i, _ in docs]
    agree = sum((i in ours_kept) == (i in dt_kept) for i in ids) / len(ids)
    assert results[("ours", 2)][1] == ours_kept, "2-worker run kept a different set"
    ratio = results[("ours", 1)][0] / results[("datatrove", 1)][0]
    ratio2 = (results[("ours", 2)][0] / 2) / (results[("datatrove", 2)][0] / 2)
    disagree = [i for i in ids if (i in ours_kept) != (i in dt_kept)]
    print(f"ratio (per core, 1 process) {ratio:.2f}x, 2 workers {ratio2:.2f}x; agreement {agree:.4f} "
          f"({len(disagree)} documents differ: {disagree[:8]})")
    print(json.dumps({
        "ratio": round(ratio, 3), "ratio_2workers": round(ratio2, 3), "agreement": round(agree, 5),
        "ours_docs_per_s": round(results[("ours", 1)][0], 1), "datatrove_docs_per_s": round(results[("datatrove", 1)][0], 1),
        "ours_docs_per_s_2workers": round(results[("ours", 2)][0], 1),
        "datatrove_docs_per_s_2workers": round(results[("datatrove", 2)][0], 1),
        "docs": len(docs), "kept_ours": len(ours_kept), "kept_datatrove": len(dt_kept), "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
