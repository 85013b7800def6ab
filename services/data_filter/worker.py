"""One work unit end to end: read, filter through its source's chain, sign for dedup, write.

A unit's outputs (kept rows with MinHash band keys, rejects, removed-document samples, stats)
are each written atomically; the stats file is written last and marks the unit finished, so a
rerun skips it and a killed unit is simply redone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from services.data_filter.accounting import Chain
from services.data_filter.dedup.minhash import Signer
from services.data_filter.filters import build_chain
from services.data_filter.io.readers import Reject, Unit, read_unit
from services.data_filter.io.writer import write_json, write_jsonl, write_parquet
from shared.config.filters import FilterConfig

PREVIEW_CHARS = 2000


def unit_paths(work: Path, index: int) -> dict[str, Path]:
    base = work / "units" / f"u{index:06d}"
    return {k: base.with_suffix(s) for k, s in
            (("rows", ".parquet"), ("rejects", ".rejects.jsonl"), ("removed", ".removed.jsonl"), ("stats", ".json"))}


def meta_json(meta: dict[str, Any]) -> str:
    text = json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(meta, sort_keys=True, ensure_ascii=True, default=str)
    return text


class UnitProcessor:
    """Holds the built chains (models loaded once) and processes units."""

    def __init__(self, cfg: FilterConfig):
        self.cfg = cfg
        self._filters: dict[str, list] = {}
        d = cfg.dedup
        self.signer = Signer(d.ngram, d.bands, d.rows, d.seed) if d.enabled else None

    def filters(self, kind: str):
        if kind not in self._filters:
            if kind not in self.cfg.chains:
                raise KeyError(f"data.filter.chains has no chain for source kind {kind!r}")
            self._filters[kind] = build_chain(self.cfg.chains[kind])
        return self._filters[kind]

    def process(self, unit: Unit, work: Path) -> dict[str, Any]:
        paths = unit_paths(work, unit.index)
        if paths["stats"].is_file():
            return json.loads(paths["stats"].read_text())
        chain = Chain(self.filters(unit.kind))
        keep_rows: dict[str, list] = {"key": [], "id": [], "text": [], "source": [], "meta": []}
        rejects: list[dict[str, Any]] = []
        removed: list[dict[str, Any]] = []
        per_reason: dict[str, int] = {}
        records = 0
        for item in read_unit(unit, self.cfg.max_doc_bytes):
            records += 1
            if isinstance(item, Reject):
                rejects.append(item.to_dict())
                continue
            hit = chain.run(item)
            if hit is None:
                keep_rows["key"].append((unit.index << 32) | len(keep_rows["key"]))
                keep_rows["id"].append(item.id)
                keep_rows["text"].append(item.text)
                keep_rows["source"].append(item.source)
                keep_rows["meta"].append(meta_json({"kind": item.kind, **item.meta}))
                continue
            tag = f"{hit[0]}:{hit[1]}"
            if per_reason.get(tag, 0) < self.cfg.samples_per_reason:
                per_reason[tag] = per_reason.get(tag, 0) + 1
                removed.append({"id": item.id, "source": item.source, "filter": hit[0], "reason": hit[1],
                                "text": item.text[:PREVIEW_CHARS], "meta": meta_json(item.meta)})
        table = pa.table({k: pa.array(v, type=pa.uint64() if k == "key" else pa.string()) for k, v in keep_rows.items()})
        if self.signer is not None:
            bands = self.signer.band_keys(keep_rows["text"])
            for b in range(self.signer.bands):
                table = table.append_column(f"band_{b}", pa.array(bands[:, b], type=pa.uint64()))
        write_parquet(table, paths["rows"])
        write_jsonl(rejects, paths["rejects"])
        write_jsonl(removed, paths["removed"])
        reasons: dict[str, int] = {}
        for r in rejects:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        stats = {
            "unit": unit.index, "source": unit.source, "kind": unit.kind, "path": unit.path,
            "records": records, "rejected": dict(sorted(reasons.items())), "docs": records - len(rejects),
            "kept": len(keep_rows["id"]), "stages": [s.to_dict() for s in chain.stats],
        }
        write_json(stats, paths["stats"])
        return stats


class RayUnitActor:
    """Ray Data callable class: one per actor, so fastText/KenLM models load once per actor."""

    def __init__(self, cfg_json: str, work: str):
        self.proc = UnitProcessor(FilterConfig.model_validate_json(cfg_json))
        self.work = Path(work)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = []
        for raw in batch["unit"]:
            unit = Unit(**json.loads(str(raw)))
            out.append(json.dumps(self.proc.process(unit, self.work)["kept"]))
        return {"kept": out}
