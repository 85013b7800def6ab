"""What `moelab data inspect` prints beyond the funnel: per source, samples, flagged-and-kept documents.

Why per source: a chain serves every input of its kind, so a reason that removes a fifth of one
source and nothing of another is invisible in the chain's totals; bytes are shown beside counts
because a rewriting filter (normalise, C4 lines) can take most of a document's text while the
document still counts as kept. Flagged-and-kept documents are read from the output shards' meta
(`layout_flag` with `layout_severity`, `edit_flag` with `edit_loss`), so a reader sees how far each
failed its rule and what the review let through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def format_sources(stats: dict[str, Any], source: str | None = None) -> str:
    """Per input source: funnel, removals by filter:reason, bytes through each filter and what edits took."""
    lines: list[str] = []
    for name, d in stats.get("sources", {}).items():
        if source is not None and name != source:
            continue
        lines.append(f"source {name} ({d.get('kind', '?')}): "
                     + " -> ".join(f"{f['stage']} {f['docs']}" for f in d.get("funnel", [])))
        removed = d.get("removed", {})
        lines.append("  removed: " + (", ".join(f"{k} {v}" for k, v in removed.items()) or "-"))
        if "ids" in d:
            lines.append("  " + describe_ids(d["ids"]))
        for st in d.get("stages", []):
            line = f"  {st['name']:<15} bytes in {_mb(st['bytes_in']):>10}  kept {_mb(st['bytes_kept']):>10}"
            if st.get("edited"):
                share = st["bytes_edited"] / st["bytes_in"] if st["bytes_in"] else 0.0
                line += (f"  edited {st['edited']} docs, -{_mb(st['bytes_edited'])} ({share:.1%} of its input)"
                         f"; past the edit bound: flagged {st.get('edit_flagged', 0)}, removed {st.get('edit_removed', 0)}")
            lines.append(line)
            if st.get("flagged"):
                lines.append(f"  {'':<15} flagged for review: " + ", ".join(f"{k} {v}" for k, v in st["flagged"].items()))
    if source is not None and not lines:
        known = ", ".join(stats.get("sources", {})) or "none"
        raise KeyError(f"no source {source!r} in this output (sources: {known})")
    return "\n".join(lines)


def describe_ids(ids: dict[str, Any]) -> str:
    """One line on document ids the run could not take as they were (stats `ids`, see the filter's accounting)."""
    issues = ", ".join(f"{k} {v}" for k, v in ids.get("issues", {}).items())
    line = (f"ids: {ids['duplicate_read']} duplicates read, {ids['duplicate_written']} written; "
            f"{ids['not_string']} not strings, {ids['missing']} missing" + (f" ({issues})" if issues else ""))
    if ids.get("duplicate_examples"):
        line += "; e.g. " + ", ".join(ids["duplicate_examples"])
    return line


def removed_samples(root: Path, source: str | None, reason: str | None, n: int) -> Iterator[dict[str, Any]]:
    """Removed-document samples, at most `n` per filter:reason, matching `source` and `reason` when given.

    `reason` matches the full tag (`c4:curly_bracket`) or the bare reason (`curly_bracket`).
    """
    shown: dict[str, int] = {}
    path = root / "removed_samples.jsonl"
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        s = json.loads(line)
        tag = f"{s['filter']}:{s['reason']}"
        if reason and tag != reason and s["reason"] != reason:
            continue
        if source and s.get("source") != source:
            continue
        if shown.get(tag, 0) >= n:
            continue
        shown[tag] = shown.get(tag, 0) + 1
        yield {**s, "tag": tag}


def flagged_kept(root: Path, source: str | None, reason: str | None, n: int) -> Iterator[dict[str, Any]]:
    """Written documents that carry a layout or edit flag, most severe first, at most `n` per flag.

    A layout flag's severity is how many times over its rule's limit the document was (1.5 = 50% past
    it); an edit flag's is the share of characters the edit would have removed.
    """
    import pyarrow.parquet as pq

    found: list[dict[str, Any]] = []
    manifest = root / "manifest.json"
    shards = [root / s["name"] for s in json.loads(manifest.read_text())["shards"]] if manifest.is_file() else []
    for shard in shards:
        t = pq.read_table(shard, columns=["id", "text", "source", "meta"])
        for row in t.to_pylist():
            if source and row["source"] != source:
                continue
            meta = json.loads(row["meta"])
            for flag_key, how_key, kind in (("layout_flag", "layout_severity", "layout"), ("edit_flag", "edit_loss", "edit")):
                flag = meta.get(flag_key)
                if flag is None:
                    continue
                tag = flag if kind == "layout" else f"{flag}:edit_over_limit"
                if reason and reason not in (tag, tag.rpartition(":")[2]):
                    continue
                found.append({"id": row["id"], "source": row["source"], "tag": tag, "kind": kind,
                              "how_far": meta.get(how_key), "text": row["text"]})
    found.sort(key=lambda r: (r["tag"], -(r["how_far"] or 0.0)))
    shown: dict[str, int] = {}
    for r in found:
        if shown.get(r["tag"], 0) < n:
            shown[r["tag"]] = shown.get(r["tag"], 0) + 1
            yield r


def describe_how_far(r: dict[str, Any]) -> str:
    if r["how_far"] is None:
        return "how far: not recorded"
    if r["kind"] == "layout":
        return f"{r['how_far']:.2f}x its rule's limit"
    return f"the edit would remove {r['how_far']:.0%} of its characters (kept whole)"
