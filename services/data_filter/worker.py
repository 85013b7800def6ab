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
from services.data_filter.filters.base import reviews_layout
from services.data_filter.io.readers import ID_ISSUE, Reject, Unit, read_unit
from services.data_filter.io.writer import write_json, write_jsonl, write_parquet
from shared.config.chains import ChainConfig, FilterConfig

PREVIEW_CHARS = 2000


def unit_paths(work: Path, index: int) -> dict[str, Path]:
    base = work / "units" / f"u{index:06d}"
    return {k: base.with_suffix(s) for k, s in
            (("rows", ".parquet"), ("ids", ".ids.parquet"), ("rejects", ".rejects.jsonl"), ("removed", ".removed.jsonl"),
             ("stats", ".json"))}


def meta_json(meta: dict[str, Any]) -> str:
    text = json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(meta, sort_keys=True, ensure_ascii=True, default=str)
    return text


class UnitProcessor:
    """Holds the built chains (models loaded once) and processes units.

    `chains` maps each input's name to its resolved chain (`DataConfig.resolved_chains()`), so every
    input runs its own chain; `config check` has already validated them all.
    """

    def __init__(self, cfg: FilterConfig, chains: dict[str, ChainConfig]):
        self.cfg = cfg
        self.chains = chains
        self._filters: dict[str, list] = {}
        d = cfg.dedup
        self.signer = Signer(d.ngram, d.bands, d.rows, d.seed) if d.enabled else None

    def filters(self, source: str):
        if source not in self._filters:
            if source not in self.chains:
                raise KeyError(f"no resolved filter chain for input {source!r}")
            self._filters[source] = build_chain(self.chains[source])
        return self._filters[source]

    def process(self, unit: Unit, work: Path) -> dict[str, Any]:
        paths = unit_paths(work, unit.index)
        if paths["stats"].is_file():
            return json.loads(paths["stats"].read_text())
        chain = Chain(self.filters(unit.source), review=reviews_layout(self.chains[unit.source]))
        keep_rows: dict[str, list] = {"key": [], "id": [], "text": [], "source": [], "meta": []}
        rejects: list[dict[str, Any]] = []
        removed: list[dict[str, Any]] = []
        per_reason: dict[str, int] = {}
        records = 0
        ids: list[str] = []  # every document's id, kept or not: the pipeline counts duplicates over the run
        id_issues: dict[str, int] = {}
        for item in read_unit(unit, self.cfg.max_doc_bytes):
            records += 1
            if isinstance(item, Reject):
                rejects.append(item.to_dict())
                continue
            ids.append(item.id)
            if ID_ISSUE in item.meta:
                id_issues[item.meta[ID_ISSUE]] = id_issues.get(item.meta[ID_ISSUE], 0) + 1
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
        write_parquet(pa.table({"id": pa.array(ids, type=pa.string())}), paths["ids"])
        write_jsonl(rejects, paths["rejects"])
        write_jsonl(removed, paths["removed"])
        reasons: dict[str, int] = {}
        for r in rejects:
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        stats = {
            "unit": unit.index, "source": unit.source, "kind": unit.kind, "path": unit.path,
            "records": records, "rejected": dict(sorted(reasons.items())), "docs": records - len(rejects),
            "kept": len(keep_rows["id"]), "stages": [s.to_dict() for s in chain.stats],
            "id_issues": dict(sorted(id_issues.items())),
        }
        write_json(stats, paths["stats"])
        return stats


class RayUnitActor:
    """Ray Data callable class: one per actor, so fastText/KenLM models load once per actor."""

    def __init__(self, cfg_json: str, chains_json: str, work: str):
        chains = {name: ChainConfig.model_validate(c) for name, c in json.loads(chains_json).items()}
        self.proc = UnitProcessor(FilterConfig.model_validate_json(cfg_json), chains)
        self.work = Path(work)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = []
        for raw in batch["unit"]:
            unit = Unit(**json.loads(str(raw)))
            out.append(json.dumps(self.proc.process(unit, self.work)["kept"]))
        return {"kept": out}
