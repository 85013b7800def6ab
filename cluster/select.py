"""Between scoring and tokenizing: keep the documents the scorer kept, and hold some out for eval.

The held-out split takes each source's documents in the order of a hash of their ids (not by
position or a random draw, so it is stable across reruns and machines and never leaks a
training document into the eval loss) until it holds `fraction` of that source's UTF-8 bytes.
Holding out a share of each source's *documents* instead would give the split other source
shares than the training stream, which mixes sources by their tokens: a source of a few long
documents lands at several times its training share or not at all, and every held-out figure
(eval loss, the frozen router's balance) then judges another mixture. Bytes stand in for tokens,
which do not exist yet; within one source the two are proportional. Writes
`train/<source>.parquet` and `eval/<source>.parquet` (columns id, text, source).
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


def hash_rank(doc_id: str) -> int:
    return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big")


def held_out_positions(ids: list[str], sizes: list[int], fraction: float) -> set[int]:
    """Positions of the documents to hold out of one source: the shortest prefix, in hash order of
    the ids, whose size is closest to `fraction` of the source's (ties: the shorter). A prefix, so
    a larger fraction holds out a superset and which documents go first does not depend on their
    lengths."""
    if not 0 <= fraction < 1:
        raise ValueError(f"held-out fraction must be in [0, 1), got {fraction}")
    if len(ids) != len(sizes):
        raise ValueError(f"{len(ids)} ids but {len(sizes)} sizes")
    target = fraction * sum(sizes)
    held: set[int] = set()
    total = 0
    for i in sorted(range(len(ids)), key=lambda i: (hash_rank(ids[i]), ids[i])):
        if abs(total + sizes[i] - target) >= abs(total - target):
            break
        held.add(i)
        total += sizes[i]
    return held


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
    out = Path(out_dir)
    report: dict = {"scored": table.num_rows, "kept": kept.num_rows, "sources": {}}
    for source in sorted(set(kept.column("source").to_pylist())):
        mine = kept.filter(pc.equal(kept.column("source"), source))
        sizes = pc.binary_length(mine.column("text")).to_pylist()
        positions = held_out_positions([str(i) for i in mine.column("id").to_pylist()], sizes, eval_fraction)
        held = pa.array([i in positions for i in range(mine.num_rows)], pa.bool_())
        train, evals = mine.filter(pc.invert(held)), mine.filter(held)
        _write(train, out / "train" / f"{source}.parquet")
        if evals.num_rows:
            _write(evals, out / "eval" / f"{source}.parquet")
        else:  # an earlier run's split of this source must not stand in for an empty one
            (out / "eval" / f"{source}.parquet").unlink(missing_ok=True)
        held_bytes = sum(sizes[i] for i in positions)
        report["sources"][source] = {"train": train.num_rows, "eval": evals.num_rows,
                                     "eval_byte_share": round(held_bytes / max(sum(sizes), 1), 4)}
    return report
