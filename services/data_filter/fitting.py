"""The fitted pass: filters that need the corpus first (perplexity), run after the streaming filters and dedup.

Three streaming reads of the units' kept rows, never the whole corpus in memory: (A) group sizes
per (source, language), small groups pooled per (kind, language); (B) each group's training
sample, by fold, up to `max_fit_tokens` per fold in input order; then models are fitted; (C) every
document is scored out of fold, fences are set per group, and each unit's decisions are written
(`work/units/uNNNNNN.fitted.json`: removed keys with reasons, scores of kept keys, the stage's
counts). `work/fitted.json` (group sizes and fences) is written last and marks the pass done, so
a rerun skips it; a killed pass is redone from its start, with the same result.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from services.data_filter.accounting import StageStats
from services.data_filter.filters import fitted_filters
from services.data_filter.filters.perplexity import PerplexityFilter, fold_of, score
from services.data_filter.io.readers import Unit
from services.data_filter.io.writer import write_json
from services.data_filter.lm.reference import load_reference_texts
from services.data_filter.worker import unit_paths
from shared.config.chains import ChainConfig

UNSCORED = "und"


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


def _language(meta: str) -> str:
    return json.loads(meta).get("language") or UNSCORED


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
    # (A) group sizes; a group too small to fit on pools with its kind and language
    sizes: Counter = Counter()
    for u in active:
        for (meta,) in _rows(unit_paths(work, u.index)["rows"], ["meta"], duplicates):
            sizes[(u.source, _language(meta))] += 1
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
        if pooled[(kind_of[src], lang)] >= filt.cfg.min_group_docs:
            return f"{kind_of[src]}:pooled/{lang}"
        return None

    # (B) training samples by group and fold, then the models
    group_size: Counter = Counter()
    for (src, lang), n in sizes.items():
        g = group_of(src, lang)
        if g is not None:
            group_size[g] += n
    folds = {g: 2 for g in group_size}
    samples: dict[str, list[list[str]]] = {}
    budget: Counter = Counter()
    group_filter: dict[str, PerplexityFilter] = {}
    for u in active:
        filt = filters[u.source]
        if filt.cfg.reference_text:
            continue
        for doc_id, text, meta in _rows(unit_paths(work, u.index)["rows"], ["id", "text", "meta"], duplicates):
            g = group_of(u.source, _language(meta))
            if g is None:
                continue
            group_filter.setdefault(g, filt)
            f = fold_of(doc_id, folds[g])
            cap = filt.cfg.max_fit_tokens // max(folds[g] - 1, 1)
            if budget[(g, f)] < cap:
                samples.setdefault(g, [[] for _ in range(folds[g])])[f].append(text)
                budget[(g, f)] += len(text.split()) + text.count("\n") + 1
    models = {}
    for g, folds in sorted(samples.items()):
        lang = g.rsplit("/", 1)[1]
        models[g] = group_filter[g].fit(folds, None if lang == UNSCORED else lang)
    references = {}
    for src, filt in filters.items():
        if filt.cfg.reference_text:
            texts = load_reference_texts(filt.cfg.reference_text)
            references[src] = filt.fit([texts], None)
    # (C) out-of-fold scores, fences per group, decisions per unit
    scores: dict[int, list[tuple]] = {}
    by_group: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for u in active:
        filt = filters[u.source]
        rows = []
        for key, doc_id, text, meta in _rows(unit_paths(work, u.index)["rows"], ["key", "id", "text", "meta"], duplicates):
            lang = _language(meta)
            g = f"{u.source}/reference" if u.source in references else group_of(u.source, lang)
            fold_models = references.get(u.source) or models.get(g or "")
            if g is None or fold_models is None:
                rows.append((key, None, 0.0, 0.0, 0, len(text.encode()), "unscored_group_too_small_or_no_word_units"))
                continue
            model = fold_models[fold_of(doc_id, len(fold_models))]
            log_ppl, gain, n = score(model, filt, text, None if lang == UNSCORED else lang)
            if n < filt.cfg.min_doc_tokens:
                rows.append((key, None, log_ppl, gain, n, len(text.encode()), "unscored_too_short"))
                continue
            rows.append((key, g, log_ppl, gain, n, len(text.encode()), None))
            group_filter.setdefault(g, filt)
            by_group[g][0].append(log_ppl)
            by_group[g][1].append(gain)
        scores[u.index] = rows
    fences = {g: group_filter[g].fences(*v) for g, v in sorted(by_group.items())}
    seconds = time.perf_counter() - t0
    total_docs = sum(len(r) for r in scores.values()) or 1
    for u in active:
        _write_unit(u, work, filters[u.source], scores[u.index], fences, seconds * len(scores[u.index]) / total_docs)
    summary = {"groups": {g: f.to_dict() for g, f in fences.items()},
               "sizes": {f"{s}/{lang}": n for (s, lang), n in sorted(sizes.items())},
               "seconds": round(seconds, 3)}
    write_json(summary, done)
    return summary


def _write_unit(u: Unit, work: Path, filt: PerplexityFilter, rows: list[tuple], fences: dict, seconds: float) -> None:
    st = StageStats(filt.name)
    skipped: Counter = Counter()
    removed: dict[str, str] = {}
    kept_scores: dict[str, list[float]] = {}
    for key, g, log_ppl, gain, _tokens, size, skip in rows:
        st.docs_in += 1
        st.bytes_in += size
        reason = None if g is None else filt.decide(log_ppl, gain, fences[g])
        if skip:
            skipped[skip] += 1
        if reason is not None:
            st.removed[reason] += 1
            removed[str(key)] = reason
            continue
        st.kept += 1
        st.bytes_kept += size
        if g is not None:
            kept_scores[str(key)] = [round(10 ** log_ppl, 2), round(gain, 4)]
    st.seconds = seconds
    stage = {**st.to_dict(), "skipped": dict(sorted(skipped.items()))}
    write_json({"removed": removed, "scores": kept_scores, "stage": stage}, fitted_path(work, u.index))
