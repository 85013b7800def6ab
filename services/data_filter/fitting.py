"""The fitted pass: filters that need the corpus first (perplexity), run after the streaming filters and dedup.

Three streaming reads of the units' kept rows, never the whole corpus in memory: (A) group sizes
per (source, language), small groups pooled per (kind, language); (B) each group's training
sample, by fold, up to `max_fit_tokens` per fold in input order; then models are fitted; (C) every
document is scored out of fold, fences are set per group, and each unit's decisions are written
(`work/units/uNNNNNN.fitted.json`: removed keys with reasons, scores of kept keys, the stage's
counts). `work/fitted.json` (group sizes and fences) is written last and marks the pass done, so
a rerun skips it; a killed pass is redone from its start, with the same result.
Layout-flagged documents (`meta.layout_flag`, see filters/base.py) are scored but neither fitted
on nor used for the fences: the model and its cut-offs describe the documents no rule doubted.
A flagged document the model vouches for is kept; any other is removed with its flag as the reason
("c4:too_few_sentences"), and the stage counts every flag it saw under `flagged`.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from services.data_filter.accounting import LAYOUT_FLAG, StageStats
from services.data_filter.filters import fitted_filters
from services.data_filter.filters.perplexity import PerplexityFilter, fold_of
from services.data_filter.io.readers import Unit
from services.data_filter.io.writer import write_json
from services.data_filter.lm.reference import load_reference_texts
from services.data_filter.worker import unit_paths
from shared.config.chains import ChainConfig

UNSCORED = "und"
FOLDS = 2


def fitted_path(work: Path, index: int) -> Path:
    return unit_paths(work, index)["rows"].with_suffix(".fitted.json")


def _rows(path: Path, columns: list[str], skip: set[int]):
    """Rows of a unit file (the listed columns), leaving out the keys in `skip`."""
    names = list(dict.fromkeys(["key", *columns]))
    t = pq.read_table(path, columns=names)
    cols = {c: t.column(c).to_pylist() for c in names}
    for i, key in enumerate(cols["key"]):
        if key not in skip:
            yield tuple(cols[c][i] for c in columns)


def _language_and_flag(meta: str) -> tuple[str, str | None]:
    m = json.loads(meta)
    return m.get("language") or UNSCORED, m.get(LAYOUT_FLAG)


def run_fitted(units: list[Unit], work: Path, chains: dict[str, ChainConfig], duplicates: set[int]) -> dict[str, Any]:
    """Run the fitted filters of every source's chain on the rows dedup kept; return the pass summary.

    The summary is also written to work/fitted.json; `duplicates` are the row keys dedup removed.
    """
    done = work / "fitted.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    filters: dict[str, PerplexityFilter] = {}
    for u in units:
        found = [f for f in fitted_filters(chains[u.source]) if isinstance(f, PerplexityFilter)]
        if found:
            filters[u.source] = found[0]
    active = [u for u in units if u.source in filters]
    # (A) group sizes (documents no rule flagged); a group too small for fences pools with its kind and language,
    # and a pool still too small for fences gets the word-order test alone (it needs a model, not quartiles)
    sizes: Counter = Counter()
    for u in active:
        for (meta,) in _rows(unit_paths(work, u.index)["rows"], ["meta"], duplicates):
            lang, flag = _language_and_flag(meta)
            sizes[(u.source, lang)] += flag is None
    kind_of = {u.source: u.kind for u in units}
    pooled: Counter = Counter()
    for (src, lang), n in sizes.items():
        if n < filters[src].cfg.min_group_docs:
            pooled[(kind_of[src], lang)] += n

    def group_of(src: str, lang: str) -> str | None:
        filt = filters[src]
        if not filt.scorable(None if lang == UNSCORED else lang):
            return None
        if sizes[(src, lang)] >= filt.cfg.min_group_docs:
            return f"{src}/{lang}"
        if pooled[(kind_of[src], lang)] >= filt.cfg.min_order_docs:
            return f"{kind_of[src]}:pooled/{lang}"
        return None

    group_size: Counter = Counter()
    for (src, lang), n in sizes.items():
        if (g := group_of(src, lang)) is not None:
            group_size[g] += n

    # (B) training samples by group and fold, then the models
    samples: dict[str, list[list[str]]] = {}
    budget: Counter = Counter()
    group_filter: dict[str, PerplexityFilter] = {}
    for u in active:
        filt = filters[u.source]
        if filt.cfg.reference_text:
            continue
        for doc_id, text, meta in _rows(unit_paths(work, u.index)["rows"], ["id", "text", "meta"], duplicates):
            lang, flag = _language_and_flag(meta)
            g = group_of(u.source, lang)
            if g is None or flag is not None:
                continue
            group_filter.setdefault(g, filt)
            f = fold_of(doc_id, FOLDS)
            if budget[(g, f)] < filt.cfg.max_fit_tokens // (FOLDS - 1):
                samples.setdefault(g, [[] for _ in range(FOLDS)])[f].append(text)
                budget[(g, f)] += len(text.split()) + text.count("\n") + 1
    models = {}
    for g, folds in sorted(samples.items()):
        if not all(folds):  # cross-fitting needs text in every fold (a model must never score its own text)
            continue
        lang = g.rsplit("/", 1)[1]
        models[g] = group_filter[g].fit(folds, None if lang == UNSCORED else lang)
    references = {}
    for src, filt in filters.items():
        if filt.cfg.reference_text:
            texts = load_reference_texts(filt.cfg.reference_text)
            references[src] = filt.fit([texts], None)
    # (C) out-of-fold scores, fences per group (from unflagged documents), decisions per unit
    scores: dict[int, list[tuple]] = {}
    by_group: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for u in active:
        filt = filters[u.source]
        rows = []
        for key, doc_id, text, meta in _rows(unit_paths(work, u.index)["rows"], ["key", "id", "text", "meta"], duplicates):
            lang, flag = _language_and_flag(meta)
            g = f"{u.source}/reference" if u.source in references else group_of(u.source, lang)
            fold_models = references.get(u.source) or models.get(g or "")
            size = len(text.encode())
            if g is None or fold_models is None:
                rows.append((key, None, None, size, "unscored_group_too_small_or_no_word_units", flag))
                continue
            s = filt.score(fold_models[fold_of(doc_id, len(fold_models))], doc_id, text, None if lang == UNSCORED else lang)
            if s.tokens < filt.cfg.min_doc_tokens:
                rows.append((key, None, s, size, "unscored_too_short", flag))
                continue
            rows.append((key, g, s, size, None, flag))
            group_filter.setdefault(g, filt)
            if flag is None and (u.source in references or group_size[g] >= filt.cfg.min_group_docs):
                by_group[g][0].append(s.log_ppl)
                by_group[g][1].append(s.gain)
        scores[u.index] = rows
    fences = {g: group_filter[g].fences(*v) for g, v in sorted(by_group.items())}
    seconds = time.perf_counter() - t0
    total_docs = sum(len(r) for r in scores.values()) or 1
    for u in active:
        _write_unit(u, work, filters[u.source], scores[u.index], fences, seconds * len(scores[u.index]) / total_docs)
    summary = {"groups": {g: f.to_dict() for g, f in fences.items()},
               "order_only_groups": sorted(g for g in models if g not in fences),
               "sizes": {f"{s}/{lang}": n for (s, lang), n in sorted(sizes.items())},
               "seconds": round(seconds, 3)}
    write_json(summary, done)
    return summary


def _write_unit(u: Unit, work: Path, filt: PerplexityFilter, rows: list[tuple], fences: dict, seconds: float) -> None:
    st = StageStats(filt.name)
    skipped: Counter = Counter()
    removed: dict[str, str] = {}
    kept_scores: dict[str, list[float | None]] = {}
    removed_scores: dict[str, list[float | None]] = {}
    for key, g, s, size, skip, flag in rows:
        st.docs_in += 1
        st.bytes_in += size
        if skip:
            skipped[skip] += 1
        if flag is not None:
            st.flagged[flag] += 1
            reason = None if g is not None and filt.vouches(s) else flag
        else:
            reason = None if g is None else filt.decide(s, fences.get(g))
        if reason is not None:
            st.removed[reason] += 1
            removed[str(key)] = reason
            if s is not None:
                removed_scores[str(key)] = _rounded(s)
            continue
        st.kept += 1
        st.bytes_kept += size
        if g is not None and s is not None:
            kept_scores[str(key)] = _rounded(s)
    st.seconds = seconds
    st.skipped = skipped
    write_json({"removed": removed, "scores": kept_scores, "removed_scores": removed_scores, "stage": st.to_dict()},
               fitted_path(work, u.index))


def _rounded(s) -> list[float | None]:
    """(perplexity, context gain, word-order z) as stored in a kept document's meta."""
    return [round(10 ** s.log_ppl, 2), round(s.gain, 4), round(s.order_z, 2) if math.isfinite(s.order_z) else None]
