"""Per-stage statistics: documents in/kept, removed per reason, bytes, seconds; merged across units.

Every removed document is attributed to the first filter that removed it, with that filter's
reason; a check a filter could not apply (no stop-word list for the language, no word units) is
counted under `skipped` with its reason. A layout hit that only flags the document for review (see
`filters/base.py`) is counted under `flagged` and the document goes on, unchanged by that filter.
Edits are counted too, so no text disappears from a document reported as kept: `edited` documents
a filter rewrote and the `bytes_edited` it took out of them. A rewriting filter's settings bound
the loss (`max_edit_loss`, from the text as read, summed over the chain's edits): past it the
document is removed (`edit_over_limit`) or kept as that filter received it and flagged
(`edit_flagged`; meta `edit_flag`, `edit_loss`). Every kept document's meta carries
`chars_original` (as read) and `chars_kept` (as written), so a reader can check the bound.
The pipeline writes these numbers as JSON and reports the funnels to the tracker.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from services.data_filter.filters.base import Doc, Filter


@dataclass
class StageStats:
    name: str
    docs_in: int = 0
    kept: int = 0
    removed: Counter = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_kept: int = 0
    seconds: float = 0.0
    skipped: Counter = field(default_factory=Counter)
    flagged: Counter = field(default_factory=Counter)
    edited: int = 0
    bytes_edited: int = 0
    edit_removed: int = 0
    edit_flagged: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "in": self.docs_in, "kept": self.kept, "removed": dict(sorted(self.removed.items())),
            "bytes_in": self.bytes_in, "bytes_kept": self.bytes_kept, "seconds": round(self.seconds, 4),
            "skipped": dict(sorted(self.skipped.items())), "flagged": dict(sorted(self.flagged.items())),
            "edited": self.edited, "bytes_edited": self.bytes_edited, "edit_removed": self.edit_removed,
            "edit_flagged": self.edit_flagged,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageStats:
        return cls(d["name"], d["in"], d["kept"], Counter(d["removed"]), d["bytes_in"], d["bytes_kept"], d["seconds"],
                   Counter(d.get("skipped", {})), Counter(d.get("flagged", {})), d.get("edited", 0), d.get("bytes_edited", 0),
                   d.get("edit_removed", 0), d.get("edit_flagged", 0))

    def merge(self, other: StageStats) -> None:
        self.docs_in += other.docs_in
        self.kept += other.kept
        self.removed.update(other.removed)
        self.skipped.update(other.skipped)
        self.flagged.update(other.flagged)
        self.bytes_in += other.bytes_in
        self.bytes_kept += other.bytes_kept
        self.seconds += other.seconds
        self.edited += other.edited
        self.bytes_edited += other.bytes_edited
        self.edit_removed += other.edit_removed
        self.edit_flagged += other.edit_flagged


LAYOUT_FLAG = "layout_flag"
LAYOUT_SEVERITY = "layout_severity"
EDIT_FLAG = "edit_flag"
EDIT_LOSS = "edit_loss"
CHARS_ORIGINAL = "chars_original"
CHARS_KEPT = "chars_kept"
EDIT_OVER_LIMIT = "edit_over_limit"


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8, without encoding an ASCII text (CPython knows that without a scan)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogatepass"))


class Chain:
    """Runs filters in order on one document, recording who removed it and why.

    With `review` (the chain's perplexity pass reviews layout), a filter's `review_reasons` flag
    the document instead: the first flag is kept in `doc.meta["layout_flag"]` as "filter:reason".
    """

    def __init__(self, filters: list[Filter], review: bool = False):
        self.filters = filters
        self.review = review
        self.stats = [StageStats(f.name) for f in filters]

    def run(self, doc: Doc) -> tuple[str, str] | None:
        """None when every filter keeps `doc`; otherwise (filter name, reason) of the first removal."""
        clock = time.perf_counter
        text = doc.text
        size = utf8_size(text)
        chars = len(text)
        for f, st in zip(self.filters, self.stats, strict=True):
            st.docs_in += 1
            st.bytes_in += size
            t0 = clock()
            reason = f.check(doc)
            st.seconds += clock() - t0
            if doc.skips:
                st.skipped.update(doc.skips)
                doc.skips.clear()
            if reason is not None and self.review and reason in f.review_reasons and not doc.past_margin:
                st.flagged[reason] += 1
                if LAYOUT_FLAG not in doc.meta:
                    doc.meta[LAYOUT_FLAG] = f"{f.name}:{reason}"
                    if doc.severity is not None:
                        doc.meta[LAYOUT_SEVERITY] = doc.severity
                doc.text = text  # the document goes on as this filter received it
                reason = None
            doc.severity, doc.past_margin = None, False
            if reason is None and doc.text is not text:  # a rewriting filter (normalise, C4) changed the text
                reason = self._bound_edit(f, st, doc, text, size, chars)
            if reason is not None:
                st.removed[reason] += 1
                return f.name, reason
            if doc.text is not text:
                text = doc.text
                size = utf8_size(text)
            st.kept += 1
            st.bytes_kept += size
        doc.meta[CHARS_ORIGINAL] = chars
        doc.meta[CHARS_KEPT] = len(doc.text)
        return None

    @staticmethod
    def _bound_edit(f: Filter, st: StageStats, doc: Doc, before: str, size_before: int, chars: int) -> str | None:
        """Count `f`'s edit of `doc` and apply its settings' bound; the removal reason, or None to go on."""
        st.edited += 1
        limit = getattr(f.cfg, "max_edit_loss", None)
        loss = 1.0 - len(doc.text) / chars if chars else 0.0
        if limit is not None and loss > limit:
            if f.cfg.large_edit == "remove":
                st.edit_removed += 1
                return EDIT_OVER_LIMIT
            st.edit_flagged += 1
            doc.meta.setdefault(EDIT_FLAG, f.name)
            doc.meta.setdefault(EDIT_LOSS, round(loss, 4))
            doc.text = before  # kept whole: as this filter received it
            return None
        st.bytes_edited += size_before - utf8_size(doc.text)
        return None


def merge_stage_lists(lists: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Sum per-stage dicts by stage name, keeping the first-seen order."""
    merged: dict[str, StageStats] = {}
    for stages in lists:
        for d in stages:
            st = StageStats.from_dict(d)
            if st.name in merged:
                merged[st.name].merge(st)
            else:
                merged[st.name] = st
    return [s.to_dict() for s in merged.values()]


def id_report(units: list[tuple[str, dict[str, int], list[str]]], written: list[tuple[str, str]],
              n_examples: int = 5) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Document ids that downstream stages cannot key on, counted over the whole run and per source.

    `units` gives, in input order, each unit's source, its `id_issues` (ids missing or not strings,
    see `io.readers`) and the ids of every document it read; `written` the (source, id) of every
    written row. A duplicate is an id already seen earlier in the run, counted at its later
    occurrence: among the documents read (`duplicate_read`) and among those written
    (`duplicate_written`; the scorer's labels and scores are keyed on ids, so these matter most).
    Returns the run's summary and one per source.
    """
    def empty() -> dict[str, Any]:
        return {"missing": 0, "not_string": 0, "issues": {}, "duplicate_read": 0, "duplicate_written": 0}

    total, per_source = empty(), {}
    examples: list[str] = []
    seen: set[str] = set()
    for source, issues, ids in units:
        d = per_source.setdefault(source, empty())
        for issue, n in issues.items():
            for target in (total, d):
                target["issues"][issue] = target["issues"].get(issue, 0) + n
                target["missing" if issue == "missing" else "not_string"] += n
        for doc_id in ids:
            if doc_id in seen:
                total["duplicate_read"] += 1
                d["duplicate_read"] += 1
                if len(examples) < n_examples and doc_id not in examples:
                    examples.append(doc_id)
            else:
                seen.add(doc_id)
    seen.clear()
    for source, doc_id in written:
        if doc_id in seen:
            total["duplicate_written"] += 1
            per_source.setdefault(source, empty())["duplicate_written"] += 1
        else:
            seen.add(doc_id)
    total["duplicate_examples"] = examples
    return total, per_source
