"""Scoring at scale: Ray Data `map_batches` over an actor pool, one output Parquet per input shard.

Each actor loads the backbone and heads once (`CascadeScorer`) and scores batches with the
early-exit cascade, in length-sorted micro-batches, with `threads_per_actor` torch threads (the
demo runs two 1-thread actors at 0.5 CPU each on 2 cores: both cores compute, and the read tasks
keep a CPU share). The pool autoscales between
`scorer.scoring.actors_min` and `actors_max`; actors take fractional CPUs (`actor_cpus`, 0.5 by
default) because Ray Data on a 2-CPU machine deadlocks when the pool holds every CPU, and
`actor_gpus=1` (with `actor_accelerator_type`) puts them on GPU nodes of a cluster; each actor
runs the backbone on CUDA when it sees a GPU (`scoring.device`).

Resumable by shard: an input shard's scores are written atomically to `scores/<name>.parquet`
once all its rows are back, and `scores/manifest.json` lists the finished shards of exactly the
inputs of this run, each with its input's identity (size, mtime, rows); a rerun skips a shard only
when its input and the heads and thresholds that scored it (`scorer_key`) are unchanged, so scores
never go stale. An input with no rows is a counted skip (`shards_empty`), not a crash. A killed
actor is restarted by Ray Data and its batch retried (actor pools default to unlimited restarts
and task retries), so a shard never ends up with duplicated or missing rows; a shard whose rows
do not match its input count is not written and is rescored next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from services.scorer.io import write_json_atomic, write_parquet_atomic
from services.scorer.rubrics import kind_of_source

SCORE_COLUMNS = ("probe_quality", "judge_quality", "quality", "keep", "judge_skipped", "probe_kept", "read_fraction")


def shard_output_name(path: str) -> str:
    """`<stem>-<8 hex of the absolute path>.parquet`: unique even when stems repeat across folders."""
    h = hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:8]
    return f"{Path(path).stem}-{h}.parquet"


class ScorerActor:
    """Holds one CascadeScorer; called by Ray Data with a pyarrow batch, returns it with score columns."""

    def __init__(self, out_dir: str, scorer_cfg: dict, kinds: dict[str, str], crash_marker: str | None = None):
        import torch

        from services.scorer.cascade import CascadeScorer
        from shared.config.scorer import ScorerConfig

        scfg = ScorerConfig.model_validate(scorer_cfg)
        if scfg.scoring.threads_per_actor:
            torch.set_num_threads(scfg.scoring.threads_per_actor)
        want = scfg.scoring.device
        device = "cuda" if want == "cuda" or (want == "auto" and torch.cuda.is_available()) else "cpu"
        self.scorer = CascadeScorer.load(out_dir, scfg, device=device)
        self.kinds = kinds
        self.crash_marker = crash_marker

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.crash_marker and not os.path.exists(self.crash_marker):
            Path(self.crash_marker).write_text(str(os.getpid()))
            os._exit(1)  # fault injection for the resume test: die mid-batch, once
        texts = [t or "" for t in batch.column("text").to_pylist()]
        sources = batch.column("source").to_pylist() if "source" in batch.column_names else ["web"] * len(texts)
        kinds = [kind_of_source(s, self.kinds) for s in sources]
        res = self.scorer.score(texts, kinds, sources, mode="cascade")
        for name in SCORE_COLUMNS:
            arr = res[name]
            batch = batch.append_column(name, pa.array(arr.astype(bool) if arr.dtype == bool else arr))
        return batch


def run_scoring(cfg, paths: list[str], *, max_shards: int | None = None, crash_marker: str | None = None,
                progress: bool = True) -> dict:
    """Score every pending shard in `paths`; returns a report (shards done/skipped, docs, keep rates)."""
    import ray

    scfg = cfg.scorer
    out = Path(scfg.out_dir)
    scores_dir = out / "scores"
    manifest_path = scores_dir / "manifest.json"
    key = scorer_key(out, scfg)
    identity = {os.path.abspath(p): input_identity(p) for p in paths}
    previous = _previous_inputs(manifest_path, key)
    empty = [p for p in paths if identity[os.path.abspath(p)]["rows"] == 0]
    pending = [p for p in paths if p not in empty and not (
        (scores_dir / shard_output_name(p)).exists() and previous.get(os.path.abspath(p)) == identity[os.path.abspath(p)])]
    skipped = len(paths) - len(empty) - len(pending)
    if max_shards is not None:
        pending = pending[:max_shards]
    expected = {os.path.abspath(p): identity[os.path.abspath(p)]["rows"] for p in pending}
    done: dict[str, int] = {}
    kept = skipped_judge = probe_kept = 0
    total = 0
    read = 0.0
    t0 = time.perf_counter()
    if pending:
        if not ray.is_initialized():
            ray.init(address=cfg.cluster.address, configure_logging=False, log_to_driver=False)
        kinds = {s.name: s.kind for s in cfg.data.inputs}
        ds = ray.data.read_parquet(pending, include_paths=True, num_cpus=scfg.scoring.read_cpus)
        # Ray 2.60's Parquet reader packs small shards into one block, and the actor pool hands out
        # whole blocks: without this split one actor would score everything while the others idle.
        ds = ds.repartition(target_num_rows_per_block=scfg.scoring.batch_size)
        ds = ds.map_batches(
            ScorerActor,
            fn_constructor_kwargs={"out_dir": str(out), "scorer_cfg": scfg.model_dump(), "kinds": kinds,
                                   "crash_marker": crash_marker},
            compute=ray.data.ActorPoolStrategy(min_size=scfg.scoring.actors_min, max_size=scfg.scoring.actors_max),
            num_cpus=scfg.scoring.actor_cpus,
            num_gpus=scfg.scoring.actor_gpus or None,
            **({"accelerator_type": scfg.scoring.actor_accelerator_type} if scfg.scoring.actor_accelerator_type else {}),
            batch_size=scfg.scoring.batch_size,
            batch_format="pyarrow",
        )
        buffers: dict[str, list[pa.Table]] = {p: [] for p in expected}
        counts = dict.fromkeys(expected, 0)
        bar = _bar(sum(expected.values()), progress)
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for path in pc.unique(batch.column("path")).to_pylist():
                src = _match_path(path, expected)  # not `key`: that is the scorer key the manifest records
                part = batch.filter(pc.equal(batch.column("path"), path)).drop_columns(["path"])
                buffers[src].append(part)
                counts[src] += part.num_rows
                bar.update(part.num_rows)
                if counts[src] == expected[src]:
                    table = pa.concat_tables(buffers.pop(src))
                    table = table.take(pc.sort_indices(table, sort_keys=[("id", "ascending")]))
                    write_parquet_atomic(table, scores_dir / shard_output_name(src))
                    done[src] = table.num_rows
                    kept += int(np.sum(table.column("keep").to_numpy(zero_copy_only=False)))
                    skipped_judge += int(np.sum(table.column("judge_skipped").to_numpy(zero_copy_only=False)))
                    probe_kept += int(np.sum(table.column("probe_kept").to_numpy(zero_copy_only=False)))
                    read += float(np.sum(table.column("read_fraction").to_numpy(zero_copy_only=False)))
                    total += table.num_rows
        bar.close()
        bad = {k: (counts[k], expected[k]) for k in expected if k not in done}
        if bad:
            raise RuntimeError(f"shards with a row count different from their input (got, expected): {bad}; "
                               "they were not written and will be rescored on the next run")
    finished = {os.path.abspath(p) for p in paths if p not in empty and (scores_dir / shard_output_name(p)).exists()
                and (os.path.abspath(p) in done or previous.get(os.path.abspath(p)) == identity[os.path.abspath(p)])}
    write_json_atomic({"scorer_key": key,
                       "shards": [{"name": shard_output_name(p), "input": p, "bytes": (scores_dir / shard_output_name(p)).stat().st_size}
                                  for p in sorted(finished)],
                       "inputs": {p: identity[p] for p in sorted(finished)},
                       "empty_inputs": sorted(os.path.abspath(p) for p in empty)}, manifest_path)
    seconds = time.perf_counter() - t0
    return {"stage": "run", "shards_scored": len(done), "shards_skipped_done": skipped,
            "shards_empty": len(empty), "empty_inputs": sorted(empty),
            "shards_pending": len(paths) - len(empty) - skipped - len(done), "docs": total, "kept": kept,
            "keep_rate": kept / total if total else 0.0, "seconds": seconds,
            "judge_passes_skipped": skipped_judge / total if total else 0.0,
            "probe_kept": probe_kept / total if total else 0.0,
            "read_fraction_mean": read / total if total else 0.0,
            "docs_per_s": total / seconds if seconds > 0 and total else 0.0}


def input_identity(path: str) -> dict:
    """What a scores shard is keyed on besides the scorer: its input file's size, mtime and row count."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "rows": pq.ParquetFile(path).metadata.num_rows}


def scorer_key(out: Path, scfg) -> str:
    """sha256 of what decides a document's scores: the heads, the thresholds and the scoring settings
    that change the cascade's output (device and pool sizes do not)."""
    from services.scorer.cascade import CALIBRATION_FILE, HEADS_FILE

    h = hashlib.sha256()
    for name in (HEADS_FILE, CALIBRATION_FILE):
        f = out / name
        h.update(name.encode() + (f.read_bytes() if f.is_file() else b"<missing>"))
    h.update(json.dumps({"backbone": scfg.backbone, "layers": [scfg.probe_layer, scfg.judge_layer],
                         "dtype": scfg.scoring.dtype, "heads": scfg.heads.model_dump(mode="json")}, sort_keys=True).encode())
    return h.hexdigest()


def _previous_inputs(manifest_path: Path, key: str) -> dict[str, dict]:
    """The input identities of the shards a previous run finished with the same scorer, else {}."""
    if not manifest_path.is_file():
        return {}
    try:
        old = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return {}
    return old.get("inputs", {}) if old.get("scorer_key") == key else {}


def _match_path(path: str, expected: dict[str, int]) -> str:
    """Ray Data reports paths without a scheme; map back to the absolute input path."""
    if path in expected:
        return path
    ab = os.path.abspath(path if path.startswith("/") else "/" + path)
    if ab in expected:
        return ab
    raise KeyError(f"Ray Data returned rows from {path!r}, which is not one of the pending shards")


def _bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="score", unit="doc", disable=not enabled, dynamic_ncols=True)
