"""The trainer's view of data: token shards (built on first use) and the held-out eval stream.

Training batches come from `shared.data`'s mixture loader (each rank reads its own slice; the
position is a small state saved in every checkpoint). Eval batches come from shards of held-out
documents (`mixture.eval_documents`), never from the training stream, and each eval reads the
same first batches, so eval losses are comparable across steps and runs. The held-out stream is
shuffled with a fixed seed, not `train.seed`: runs that differ only by seed are measured on the
same tokens, so their spread is the runs' spread and not that of two different eval sets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import torch.distributed as dist

from shared.config import ExperimentConfig
from shared.data.atomic import atomic_write_json
from shared.data.loader import MixtureLoader
from shared.data.prepare import ensure_tokenizer, make_loader, tokenize

log = logging.getLogger(__name__)


EVAL_SEED = 0


def eval_config(cfg: ExperimentConfig) -> ExperimentConfig | None:
    """The config whose mixture reads the held-out shards (in `EVAL_SEED`'s order, whatever the
    run's seed), or None when none are configured."""
    if not cfg.mixture.eval_documents:
        return None
    mix = cfg.mixture.model_copy(update={
        "documents": list(cfg.mixture.eval_documents),
        "shard_dir": str(Path(cfg.mixture.shard_dir).with_name(Path(cfg.mixture.shard_dir).name + "-eval")),
        "on_exhausted": "repeat",
        "rates": {},
    })
    return cfg.model_copy(update={"mixture": mix, "train": cfg.train.model_copy(update={"seed": EVAL_SEED})})


RAW_SUFFIXES = (".jsonl", ".jsonl.gz")


def materialize_raw(cfg: ExperimentConfig, globs: list[str], out: Path) -> list[str]:
    """Raw JSONL documents (e.g. the demo corpus) → Parquet (id, text, source) the tokenizer reads.

    Only records with a string `text` are kept; the count of the others is logged, never hidden.
    A pattern matching no raw file passes through unchanged (a Parquet glob, or one that matches
    nothing, which the shard build then names); the Parquet files a pattern matches beside raw ones
    pass through too. A copy is named after its file's stem plus a hash of the file's full path:
    `a/notes.jsonl` and `b/notes.jsonl.gz` are two copies, not one overwriting the other. The
    documents' `source` stays the file's stem, which is what `mixture.rates` names.
    """
    import glob
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    result: list[str] = []
    for pattern in globs:
        files = sorted(glob.glob(pattern))
        raw = [f for f in files if f.endswith(RAW_SUFFIXES)]
        if not raw:
            result.append(pattern)
            continue
        result.extend(f for f in files if f.endswith(".parquet"))
        for path in raw:
            stem = Path(path).name.split(".")[0]
            target = out / f"{stem}-{_path_hash(path)}.parquet"
            result.append(str(target))
            made_from = target.with_name(target.name + ".source.json")
            st = os.stat(path)
            identity = {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            if target.is_file() and made_from.is_file() and json.loads(made_from.read_text()) == identity:
                continue  # the copy of this very file; a changed file is copied again
            opener = gzip.open if path.endswith(".gz") else open
            rows, bad = [], 0
            with opener(path, "rt", encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        bad += 1
                        continue
                    if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                        bad += 1
                        continue
                    rows.append({"id": str(rec.get("id", f"{stem}-{i}")), "text": rec["text"],
                                 "source": str(rec.get("source", stem))})
            if bad:
                log.warning("%s: %d records without a string text skipped", path, bad)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            pq.write_table(pa.Table.from_pylist(rows), tmp)
            tmp.replace(target)
            atomic_write_json(made_from, identity)
    return result


def _path_hash(path: str) -> str:
    """A short, stable name part for a raw file's full path (its copy's name must not depend on the stem alone)."""
    return hashlib.sha256(os.path.abspath(path).encode("utf-8")).hexdigest()[:10]


def with_parquet_documents(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config with any raw JSONL `mixture.documents`/`eval_documents` replaced by Parquet copies."""
    m = cfg.mixture
    base = Path(m.shard_dir).parent / "documents"
    docs = materialize_raw(cfg, list(m.documents), base / "train")
    evals = materialize_raw(cfg, list(m.eval_documents), base / "eval")
    return cfg.model_copy(update={"mixture": m.model_copy(update={"documents": docs, "eval_documents": evals})})


def prepare_shards(cfg: ExperimentConfig, rank: int) -> None:
    """Rank 0 brings the shards (train and eval) up to date with their documents, in-process; the
    others wait for it.

    Never "shards exist, so use them": the build is keyed on every input file (path, size, mtime)
    and the tokenizer's hash, skips what is current, rebuilds what changed, and the manifest lists
    only the current inputs' shards. A document glob that matches nothing (say, a deleted eval
    file) is an error naming it, not an evaluation on the shards of a file that is gone.
    """
    if rank == 0:
        tok = None  # the training documents' tokenizer, for the held-out shards too
        for c in (cfg, eval_config(cfg)):
            if c is not None:
                local = c.model_copy(update={"mixture": c.mixture.model_copy(update={"use_ray": False})})
                tok = tok or ensure_tokenizer(local)
                manifest = tokenize(local, progress=False, tokenizer=tok)
                build = manifest.get("build", {})
                if build.get("items_built"):
                    log.info("token shards in %s: %d of %d items (re)built from changed or new documents",
                             c.mixture.shard_dir, build["items_built"], build["items"])
    if dist.is_initialized():
        dist.barrier()


def train_loader(cfg: ExperimentConfig, rank: int, world: int) -> MixtureLoader:
    return make_loader(cfg, rank=rank, world_size=world)


def eval_loader(cfg: ExperimentConfig, rank: int, world: int) -> MixtureLoader | None:
    ecfg = eval_config(cfg)
    return None if ecfg is None else make_loader(ecfg, rank=rank, world_size=world)
