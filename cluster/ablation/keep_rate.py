"""A keep-rate arm: the scorer's scored set re-selected at another keep rate (e.g. 30, 50 or 70%).

The scorer decides what to keep the same way at every rate: the calibrate stage sets a threshold
τ_keep per source at the quantile of the scorer's quality that keeps the target fraction
(`services.scorer.calibrate.tau_for_keep_rate`), and the score stage keeps a document whose
quality reaches its source's τ_keep. An arm at keep rate r applies that rule with τ_keep fitted at
r on each source's scored documents themselves, so the arm keeps r of every source (up to ties)
without scoring anything again: the documents come from the score stage's declared output (its
manifest), which covers the whole filtered set.

What this cannot reproduce: the cascade stops at the Probe for documents far below the threshold
it was calibrated at, and their `quality` is then the Probe's, not the Judge's. At a keep rate
above the pipeline's, such documents can rank among the kept ones on the Probe's word; the arm's
report counts them (`probe_only_kept`) so the approximation is visible, never silent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cluster.ablation.documents import RecipeError
from cluster.stages import digest, file_fingerprints
from shared.data.atomic import atomic_write_bytes, atomic_write_json
from shared.data.stage_outputs import StageOutputError, declared_outputs

COLUMNS = ["id", "text", "source"]
SELECTED = "selected.json"


def scored_files(arm: str, scores: str) -> list[Path]:
    """The score stage's declared shards under `scores`; a folder it has not finished is refused naming the arm."""
    try:
        files = declared_outputs(scores, what="the scorer", how="moelab score run CONFIG (or the pipeline)")
    except StageOutputError as exc:
        raise RecipeError(f"ablation arm {arm!r}: {exc}") from None
    if not files:
        raise RecipeError(f"ablation arm {arm!r}: {scores}/manifest.json declares no scored shard")
    return files


def _read(arm: str, files: list[Path]) -> pa.Table:
    tables = []
    for f in files:
        table = pq.read_table(f)
        missing = sorted({*COLUMNS, "quality"} - set(table.column_names))
        if missing:
            raise RecipeError(f"ablation arm {arm!r}: {f} has no column(s) {missing}: not a score stage shard")
        skipped = (table.column("judge_skipped") if "judge_skipped" in table.column_names
                   else pa.array(np.zeros(table.num_rows, dtype=bool)))
        tables.append(pa.table({**{c: table.column(c).cast(pa.string()) for c in COLUMNS},
                                "quality": table.column("quality").cast(pa.float64()),
                                "judge_skipped": skipped.cast(pa.bool_())}))
    return pa.concat_tables(tables)


def select_at_keep_rate(arm: str, scores: str, rate: float, out_dir: Path) -> tuple[list[Path], dict[str, Any]]:
    """Write `out_dir/<source>.parquet` (id, text, source) with each source's documents whose scorer
    quality reaches that source's τ_keep at `rate`; returns the files and what identifies them.
    A document without a finite quality is never kept and is counted (`unscored`). Reused while the
    scored shards and the rate are unchanged."""
    from services.scorer.calibrate import tau_for_keep_rate

    files = scored_files(arm, scores)
    key = {"scores": file_fingerprints([str(f) for f in files]), "keep_rate": rate}
    marker = out_dir / SELECTED
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done.get("key") == digest(key) and all(Path(p).is_file() for p in done["files"]):
            return [Path(p) for p in done["files"]], {**key, "selection": done["selection"]}
    table = _read(arm, files)
    shutil.rmtree(out_dir, ignore_errors=True)  # a source an earlier selection kept must not linger
    written: list[Path] = []
    selection: dict[str, dict[str, Any]] = {}
    for source in sorted(set(table.column("source").to_pylist())):
        mine = table.filter(pc.equal(table.column("source"), source))
        quality = mine.column("quality").to_numpy(zero_copy_only=False)
        finite = np.isfinite(quality)
        if not finite.any():
            selection[source] = {"scored": mine.num_rows, "kept": 0, "unscored": int((~finite).sum()), "tau_keep": None}
            continue
        tau = tau_for_keep_rate(quality[finite], rate)
        keep = finite & (np.where(finite, quality, -np.inf) >= tau)
        kept = mine.filter(pa.array(keep))
        kept = kept.take(pc.sort_indices(kept, sort_keys=[("id", "ascending")]))
        probe_only = int(np.asarray(kept.column("judge_skipped").to_numpy(zero_copy_only=False)).sum())
        selection[source] = {"scored": mine.num_rows, "kept": kept.num_rows, "unscored": int((~finite).sum()),
                             "tau_keep": tau, "probe_only_kept": probe_only}
        if kept.num_rows:
            target = out_dir / f"{source}.parquet"
            sink = pa.BufferOutputStream()
            pq.write_table(kept.select(COLUMNS), sink)
            atomic_write_bytes(target, sink.getvalue().to_pybytes())
            written.append(target)
    if not written:
        raise RecipeError(f"ablation arm {arm!r}: keep_rate {rate} over {scores} kept no document "
                          f"(per source: {selection})")
    atomic_write_json(marker, {"key": digest(key), "files": [str(p) for p in written], "selection": selection})
    return written, {**key, "selection": selection}
