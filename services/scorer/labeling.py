"""Label documents with an oracle: cache lookup, schema validation, retries, recorded failures.

The loop: look every document up in the label cache; send the misses to the oracle; validate
each answer against its rubric's schema (`Rubric.parse`); re-ask only the invalid ones, up to
`max_retries` more times; a document still invalid after that is recorded as a failure with its
last raw answer and the reason. Nothing is defaulted or dropped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from services.scorer.label_cache import LabelCache, cache_key
from services.scorer.oracle.base import Oracle, OracleRequest
from services.scorer.rubrics import InvalidAnswer, rubric_for

log = logging.getLogger(__name__)


@dataclass
class LabelOutcome:
    labels: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    cache_hits: int = 0
    oracle_calls: int = 0
    retries: int = 0

    def summary(self) -> dict:
        return {
            "labelled": len(self.labels),
            "failed": len(self.failures),
            "cache_hits": self.cache_hits,
            "oracle_calls": self.oracle_calls,
            "retries": self.retries,
        }


def label_documents(
    docs: list[dict], oracle: Oracle, cache: LabelCache | None, *, max_retries: int = 3, max_chars: int = 6000,
    progress=None,
) -> LabelOutcome:
    """Label `docs` (dicts with id, text, kind[, source]); return labels and failures in input order."""
    out = LabelOutcome()
    calls_before = oracle.calls
    results: dict[int, dict] = {}
    pending: list[int] = []
    for i, doc in enumerate(docs):
        rubric = rubric_for(doc["kind"])
        hit = cache.get(cache_key(doc["text"], rubric.key, oracle.model)) if cache is not None else None
        if hit is not None:
            out.cache_hits += 1
            results[i] = _label_row(doc, rubric, hit)
        else:
            pending.append(i)
    if progress is not None:
        progress.update(out.cache_hits)

    last_raw: dict[int, str] = {}
    last_err: dict[int, str] = {}
    for attempt in range(max_retries + 1):
        if not pending:
            break
        if attempt:
            out.retries += len(pending)
            log.info("re-asking the oracle for %d invalid answer(s), attempt %d", len(pending), attempt + 1)
        reqs = []
        for i in pending:
            doc, rubric = docs[i], rubric_for(docs[i]["kind"])
            reqs.append(OracleRequest(rubric.prompt(doc["text"], doc["kind"], max_chars), rubric.json_schema(),
                                      doc["text"], doc["kind"], rubric.answer_regex()))
        answers = oracle.answer(reqs)
        still = []
        for i, raw in zip(pending, answers, strict=True):
            doc, rubric = docs[i], rubric_for(docs[i]["kind"])
            try:
                scores = rubric.parse(raw)
            except InvalidAnswer as exc:
                last_raw[i], last_err[i] = raw, str(exc)
                still.append(i)
                continue
            results[i] = _label_row(doc, rubric, scores)
            if cache is not None:
                cache.put(cache_key(doc["text"], rubric.key, oracle.model), scores, raw)
            if progress is not None:
                progress.update(1)
        pending = still

    for i in pending:
        doc = docs[i]
        out.failures.append({"id": doc["id"], "kind": doc["kind"], "source": doc.get("source", doc["kind"]),
                             "rubric": rubric_for(doc["kind"]).key, "raw": last_raw[i], "error": last_err[i],
                             "attempts": max_retries + 1})
        if progress is not None:
            progress.update(1)
    out.labels = [results[i] for i in sorted(results)]
    out.oracle_calls = oracle.calls - calls_before
    if cache is not None:
        cache.flush()
    return out


def _label_row(doc: dict, rubric, scores: dict[str, int]) -> dict:
    return {"id": doc["id"], "kind": doc["kind"], "source": doc.get("source", doc["kind"]), "rubric": rubric.key,
            "scores": [float(scores[d]) for d in rubric.dims], "quality": rubric.aggregate(scores)}
