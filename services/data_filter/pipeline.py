"""The data filter stage: units -> filter chains (Ray Data actor pool) -> MinHash dedup -> fitted filters -> shards.

Dedup runs before the fitted filters (as CCNet deduplicates before its LM filter): the perplexity
model is then fitted and cross-validated on distinct documents (a duplicate in the other fold would
be memorised and look unusually fluent), and a cluster's kept member is the one scored.

Layout of `out_dir`:
  part-00000.parquet ...  kept documents, schema (id, text, source, meta), input order
  manifest.json           shard names, rows, bytes, sha256; written last = the run is complete
  stats.json              per-stage counts (in, kept, removed per reason, bytes, seconds), funnel
  rejects.jsonl           every bad input line with its file, line and reason
  removed_samples.jsonl   up to `samples_per_reason` removed documents per (filter, reason)
  work/                   the plan (inputs' bytes, settings), per-unit results, the fitted pass, the dedup map;
                          what a rerun resumes from, and what a changed input rebuilds (see rerun.py)
Determinism: units are planned from the inputs alone, each unit's rows keep file order, dedup
keeps the first document of a cluster, shards are cut by row count; so 1 worker, 2 workers and
a killed-then-resumed run write byte-identical shards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from services.data_filter.accounting import id_report, merge_stage_lists
from services.data_filter.dedup.lsh import find_duplicates
from services.data_filter.fitting import fitted_path, run_fitted
from services.data_filter.io.readers import Unit, plan_units
from services.data_filter.io.writer import OUTPUT_SCHEMA, sha256, write_json, write_jsonl, write_parquet
from services.data_filter.report import report_funnel
from services.data_filter.rerun import make_plan, plan_fingerprint, reconcile, refuse_inputs_inside
from services.data_filter.worker import UnitProcessor, meta_json, unit_paths
from shared.config.data import DataConfig

Progress = Callable[[int, int], None]
log = logging.getLogger(__name__)


def settings_hash(data: DataConfig) -> str:
    """The filter settings an output depends on (not how many workers or where Ray runs)."""
    body = json.dumps({"filter": data.filter.model_dump(mode="json", exclude={"workers", "actor_cpus", "ray_address"}),
                       "chains": {k: c.model_dump(mode="json") for k, c in data.resolved_chains().items()}}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def run(data: DataConfig, out_dir: str | Path | None = None, progress: Progress | None = None,
        experiment: Any = None) -> dict[str, Any]:
    """Filter and dedup `data.inputs` into `out_dir` (default `data.out_dir`); return stats.json's content.

    With `experiment` (an `ExperimentConfig`), the funnel is also reported to its tracker.
    """
    if not data.inputs:
        raise ValueError("data.inputs is empty: add at least one source (name, kind, paths)")
    fcfg = data.filter
    chains = data.resolved_chains()
    out = Path(out_dir or data.out_dir)
    work = out / "work"
    t_start = time.perf_counter()
    units = plan_units(data.inputs, fcfg.unit_bytes)
    refuse_inputs_inside(out, units)
    plan = make_plan(settings_hash(data), units)
    fp = plan_fingerprint(plan)
    rebuilt = reconcile(out, work, plan, lambda index: unit_paths(work, index))
    pending = [u for u in units if not unit_paths(work, u.index)["stats"].is_file()]
    done = len(units) - len(pending)
    if progress:
        progress(done, len(units))
    t0 = time.perf_counter()
    if pending:
        if fcfg.workers <= 0:
            proc = UnitProcessor(fcfg, chains)
            for u in pending:
                proc.process(u, work)
                done += 1
                if progress:
                    progress(done, len(units))
        else:
            _run_ray(fcfg, chains, pending, work, lambda: progress(None, len(units)) if progress else None)
    filter_seconds = time.perf_counter() - t0
    rows = [str(unit_paths(work, u.index)["rows"]) for u in units]
    t0 = time.perf_counter()
    dup_file = work / "dedup.json"
    if not fcfg.dedup.enabled:
        dups: dict[int, int] = {}
    elif dup_file.is_file():
        dups = {int(k): v for k, v in json.loads(dup_file.read_text()).items()}
    else:
        dups = find_duplicates(rows, fcfg.dedup.bands, fcfg.workers, fcfg.actor_cpus)
        write_json({str(k): v for k, v in sorted(dups.items())}, dup_file)
    dedup_seconds = time.perf_counter() - t0
    fitted_summary = run_fitted(units, work, chains, set(dups))
    fitted = {u.index: json.loads(p.read_text()) for u in units if (p := fitted_path(work, u.index)).is_file()}
    unit_stats = [json.loads(unit_paths(work, u.index)["stats"].read_text()) for u in units]
    for s in unit_stats:
        if s["unit"] in fitted:
            s["stages"].append(fitted[s["unit"]]["stage"])
            s["fitted_removed"] = fitted[s["unit"]]["stage"]["in"] - fitted[s["unit"]]["stage"]["kept"]
    removed_fitted = {int(k): r for f in fitted.values() for k, r in f["removed"].items()}
    scores = {int(k): v for f in fitted.values() for k, v in f["scores"].items()}
    shards, extra_samples, written_rows = _write_shards(rows, dups, removed_fitted, scores, out, fcfg.shard_docs,
                                                        fcfg.samples_per_reason)
    stats = _summarise(unit_stats, dups, len(written_rows), filter_seconds, dedup_seconds, time.perf_counter() - t_start)
    _add_id_report(stats, units, unit_stats, work, written_rows)
    stats["fitted"] = fitted_summary
    if rebuilt:
        stats["rebuilt"] = rebuilt
    _merge_side_files(units, work, out, extra_samples, fcfg.samples_per_reason)
    stats["tracker"] = report_funnel(stats, experiment)
    write_json(stats, out / "stats.json")
    write_json({"schema": [f.name for f in OUTPUT_SCHEMA], "shards": shards, "documents": len(written_rows),
                "fingerprint": fp}, out / "manifest.json")
    return stats


def _run_ray(fcfg, chains, pending: list[Unit], work: Path, tick) -> None:
    import ray

    from services.data_filter.worker import RayUnitActor

    if not ray.is_initialized():
        ray.init(address=fcfg.ray_address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    items = [{"unit": json.dumps(dataclasses.asdict(u))} for u in pending]
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        RayUnitActor,
        fn_constructor_args=(fcfg.model_dump_json(), json.dumps({k: c.model_dump(mode="json") for k, c in chains.items()}),
                             str(work.resolve())),
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=fcfg.workers),
        num_cpus=fcfg.actor_cpus,
    )
    for _ in ds.iter_rows():
        tick()


def _write_shards(rows: list[str], dups: dict[int, int], fitted_out: dict[int, str], scores: dict[int, list[float]],
                  out: Path, per_shard: int, n_samples: int):
    """Cut kept rows (not removed by a fitted filter, not duplicates) into shards of `per_shard` documents.

    Shards already written are skipped; kept documents' meta gains their perplexity, context gain and
    word-order z.
    """
    shards: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    fitted_samples: list[dict[str, Any]] = []
    per_reason: dict[str, int] = {}
    id_of_key: dict[int, str] = {}
    reps = set(dups.values())
    buf: list[pa.Table] = []
    n_buf = 0
    written: list[tuple[str, str]] = []  # (source, id) of every written row

    def flush(final: bool) -> None:
        nonlocal buf, n_buf
        while n_buf >= per_shard or (final and n_buf):
            table = pa.concat_tables(buf)
            head, rest = table.slice(0, per_shard), table.slice(per_shard)
            path = out / f"part-{len(shards):05d}.parquet"
            if not path.is_file():
                write_parquet(head.select(OUTPUT_SCHEMA.names).cast(OUTPUT_SCHEMA), path)
            shards.append({"name": path.name, "rows": head.num_rows, "bytes": path.stat().st_size, "sha256": sha256(path)})
            buf, n_buf = ([rest] if rest.num_rows else []), rest.num_rows

    for path in rows:
        t = pq.read_table(path, columns=["key", *OUTPUT_SCHEMA.names])
        keys = t.column("key").to_pylist()
        if reps:  # before the fitted removals: a duplicate names its representative even when that one went later
            ids = t.column("id").to_pylist()
            id_of_key.update((k, i) for k, i in zip(keys, ids, strict=True) if k in reps)
        if fitted_out:
            gone = [i for i, k in enumerate(keys) if k in fitted_out]
            for i in gone:
                reason = fitted_out[keys[i]]
                if per_reason.get(reason, 0) < n_samples:
                    per_reason[reason] = per_reason.get(reason, 0) + 1
                    filt, _, why = reason.rpartition(":")  # a confirmed layout flag names its own filter
                    fitted_samples.append({"id": t.column("id")[i].as_py(), "source": t.column("source")[i].as_py(),
                                           "filter": filt or "perplexity", "reason": why, "meta": t.column("meta")[i].as_py(),
                                           "text": t.column("text")[i].as_py()[:2000]})
            if gone:
                t = t.filter(pa.array([k not in fitted_out for k in keys], type=pa.bool_()))
                keys = t.column("key").to_pylist()
        if scores:
            metas = t.column("meta").to_pylist()
            for i, k in enumerate(keys):
                if k in scores:
                    m = json.loads(metas[i])
                    m["perplexity"], m["context_gain"], m["word_order_z"] = scores[k]
                    metas[i] = meta_json(m)
            t = t.set_column(t.schema.get_field_index("meta"), "meta", pa.array(metas, type=pa.string()))
        if dups:
            mask = [k not in dups for k in keys]
            for i, k in enumerate(keys):
                if k in dups and len(samples) < n_samples:
                    samples.append({"key": k, "id": t.column("id")[i].as_py(), "text": t.column("text")[i].as_py()[:2000],
                                    "source": t.column("source")[i].as_py(), "rep_key": dups[k]})
            t = t.filter(pa.array(mask, type=pa.bool_()))
        written.extend(zip(t.column("source").to_pylist(), t.column("id").to_pylist(), strict=True))
        buf.append(t.select(OUTPUT_SCHEMA.names))
        n_buf += t.num_rows
        flush(False)
    flush(True)
    for s in samples:
        s["duplicate_of"] = id_of_key.get(s.pop("rep_key"), "")
        s.pop("key")
        s.update({"filter": "dedup", "reason": "near_duplicate", "meta": "{}"})
    return shards, fitted_samples + samples, written


def _add_id_report(stats: dict[str, Any], units: list[Unit], unit_stats: list[dict[str, Any]], work: Path,
                   written: list[tuple[str, str]]) -> None:
    """stats `ids` and each source's `ids`: missing, non-string and duplicate document ids (see
    `accounting.id_report`); a duplicate among the written documents is also logged."""
    per_unit = [(s["source"], s.get("id_issues", {}),
                 pq.read_table(unit_paths(work, u.index)["ids"]).column("id").to_pylist())
                for u, s in zip(units, unit_stats, strict=True)]
    total, per_source = id_report(per_unit, written)
    stats["ids"] = total
    for source, d in stats["sources"].items():
        d["ids"] = per_source[source]  # every source has units, so an entry
    if total["duplicate_written"]:
        log.warning("data filter: %d written documents share an id with an earlier one (e.g. %s); the scorer keys "
                    "labels and scores on ids: give the inputs unique ids", total["duplicate_written"],
                    ", ".join(total["duplicate_examples"][:3]))


def _summarise(unit_stats, dups, written, filter_s, dedup_s, total_s) -> dict[str, Any]:
    records = sum(s["records"] for s in unit_stats)
    rejected: dict[str, int] = {}
    for s in unit_stats:
        for k, v in s["rejected"].items():
            rejected[k] = rejected.get(k, 0) + v
    docs = sum(s["docs"] for s in unit_stats)
    kept = sum(s["kept"] for s in unit_stats)
    chains: dict[str, list] = {}
    for kind in sorted({s["kind"] for s in unit_stats}):
        chains[kind] = merge_stage_lists([s["stages"] for s in unit_stats if s["kind"] == kind])
    source_of_unit = {s["unit"]: s["source"] for s in unit_stats}
    dups_per_source: dict[str, int] = {}
    for key in dups:
        src = source_of_unit[key >> 32]
        dups_per_source[src] = dups_per_source.get(src, 0) + 1
    by_source: dict[str, dict[str, Any]] = {}
    for s in unit_stats:
        d = by_source.setdefault(s["source"], {"kind": s["kind"], "records": 0, "docs": 0, "kept": 0, "fitted_removed": 0,
                                               "removed": {}})
        for k in ("records", "docs", "kept", "fitted_removed"):
            d[k] += s.get(k, 0)
        for st in s["stages"]:
            for reason, n in st["removed"].items():
                tag = reason if ":" in reason else f"{st['name']}:{reason}"  # confirmed layout flags keep their filter
                d["removed"][tag] = d["removed"].get(tag, 0) + n
    for src, d in by_source.items():
        d["stages"] = merge_stage_lists([s["stages"] for s in unit_stats if s["source"] == src])
        d["near_duplicates"] = dups_per_source.get(src, 0)
        d["written"] = d["kept"] - d["near_duplicates"] - d["fitted_removed"]
        d["removed"] = dict(sorted(d["removed"].items()))
        d["funnel"] = _funnel(d["records"], d["docs"], d["kept"], d["kept"] - d["near_duplicates"], d["written"], d["written"])
    fitted_removed = sum(d["fitted_removed"] for d in by_source.values())
    return {
        "records": records, "rejected": dict(sorted(rejected.items())), "docs": docs, "kept_after_filters": kept,
        "documents_in": records, "documents_out": written,
        "near_duplicates": len(dups), "written": written, "chains": chains, "sources": by_source,
        "funnel": _funnel(records, docs, kept, kept - len(dups), kept - len(dups) - fitted_removed, written),
        "seconds": {"filters": round(filter_s, 3), "dedup": round(dedup_s, 3), "total": round(total_s, 3)},
        "units": len(unit_stats),
    }


def _funnel(records: int, valid: int, kept: int, deduped: int, fitted: int, written: int) -> list[dict[str, Any]]:
    return [{"stage": "read", "docs": records}, {"stage": "valid", "docs": valid}, {"stage": "filters", "docs": kept},
            {"stage": "dedup", "docs": deduped}, {"stage": "perplexity", "docs": fitted},
            {"stage": "written", "docs": written}]


def _merge_side_files(units: list[Unit], work: Path, out: Path, dedup_samples: list[dict[str, Any]], limit: int) -> None:
    rejects: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    for u in units:
        p = unit_paths(work, u.index)
        rejects.extend(json.loads(line) for line in p["rejects"].read_text(encoding="utf-8").splitlines() if line)
        removed.extend(json.loads(line) for line in p["removed"].read_text(encoding="utf-8").splitlines() if line)
    write_jsonl(rejects, out / "rejects.jsonl")
    per_reason: dict[tuple[str, str], int] = {}
    kept_samples = []
    for r in removed:
        tag = (r["filter"], r["reason"])
        if per_reason.get(tag, 0) < limit:
            per_reason[tag] = per_reason.get(tag, 0) + 1
            kept_samples.append(r)
    write_jsonl(kept_samples + dedup_samples, out / "removed_samples.jsonl")
