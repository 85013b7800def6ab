"""Between scoring and tokenizing: keep the documents the scorer kept, and hold some out for eval.

The held-out split is decided by a hash of the document id (not by position or a random draw),
so it is stable across reruns and machines and never leaks a training document into the eval
loss. Writes `train/<source>.parquet` and `eval/<source>.parquet` (columns id, text, source).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shared.data.atomic import atomic_write_bytes
from shared.data.stage_outputs import declared_outputs

COLUMNS = ["id", "text", "source"]


def is_held_out(doc_id: str, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def _write(table: pa.Table, path: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def select_kept(scores_dir: str | Path, out_dir: str | Path, eval_fraction: float) -> dict:
    """Split the kept documents of the scored shards `scores_dir/manifest.json` declares (never
    leftovers of an earlier run) into train/eval Parquet per source; return counts."""
    paths = declared_outputs(scores_dir, what="the scorer", how="moelab score run CONFIG")
    if not paths:
        raise FileNotFoundError(f"{scores_dir}/manifest.json declares no scored shards")
    table = pa.concat_tables(pq.read_table(p, columns=[*COLUMNS, "keep"]) for p in paths)
    kept = table.filter(pc.equal(table.column("keep"), True)).select(COLUMNS)
    kept = kept.take(pc.sort_indices(kept, sort_keys=[("id", "ascending")]))
    held = pa.array([is_held_out(str(i), eval_fraction) for i in kept.column("id").to_pylist()], pa.bool_())
    out = Path(out_dir)
    report: dict = {"scored": table.num_rows, "kept": kept.num_rows, "sources": {}}
    for source in sorted(set(kept.column("source").to_pylist())):
        mine = pc.equal(kept.column("source"), source)
        train = kept.filter(pc.and_(mine, pc.invert(held)))
        evals = kept.filter(pc.and_(mine, held))
        _write(train, out / "train" / f"{source}.parquet")
        if evals.num_rows:
            _write(evals, out / "eval" / f"{source}.parquet")
        report["sources"][source] = {"train": train.num_rows, "eval": evals.num_rows}
    return report
