"""Config-driven entry points: tokenize the documents a config names and open its mixture.

These are what `moelab data tokenize|mixture-stats`, the pipeline job and the trainer call, so
that the path from `ExperimentConfig` to shards and batches is written once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from shared.config import ExperimentConfig
from shared.data.shards import ShardError
from shared.data.stage_outputs import StageOutputError, resolve_documents
from shared.data.tokenizer import CONFIG_FILE, MoeTokenizer, load_tokenizer, train_tokenizer


def document_paths(cfg: ExperimentConfig) -> list[Path]:
    """Parquet files named by `mixture.documents` (globs, or folders with a manifest); default: the
    shards the data filter's manifest in `data.out_dir` declares (never its pre-dedup work files)."""
    try:
        paths = resolve_documents(list(cfg.mixture.documents), cfg.data.out_dir)
    except StageOutputError as exc:
        raise ShardError(str(exc)) from None
    if not paths:
        raise ShardError(
            f"no Parquet documents match mixture.documents={list(cfg.mixture.documents)}: fix the globs, or leave it "
            "empty to read the data filter's declared output"
        )
    return paths


def iter_texts(paths: list[Path], limit: int) -> Iterator[str]:
    """The first `limit` non-null `text` values of the files, read batch by batch."""
    import pyarrow.parquet as pq

    left = limit
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=4096):
            for text in batch.column(0).to_pylist():
                if text is not None:
                    yield text
                    left -= 1
                    if left == 0:
                        return


def ensure_tokenizer(cfg: ExperimentConfig, paths: list[Path] | None = None) -> MoeTokenizer:
    """Load `tokenizer.path`, or reuse the tokenizer in `tokenizer.out_dir` when it was trained with the
    same settings, or train one on the documents (a rerun therefore keeps the same hash)."""
    tcfg = cfg.mixture.tokenizer
    if tcfg.path:
        return load_tokenizer(tcfg.path, eos_token=tcfg.eos_token)
    out = Path(tcfg.out_dir)
    wanted = {"vocab_size": tcfg.vocab_size, "min_frequency": tcfg.min_frequency, "eos_token": tcfg.eos_token}
    meta_file = out / CONFIG_FILE
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if all(meta.get(k) == v for k, v in wanted.items()) and meta.get("train_docs") == tcfg.train_docs:
            return load_tokenizer(out, eos_token=tcfg.eos_token)
    paths = paths if paths is not None else document_paths(cfg)
    tok = train_tokenizer(
        iter_texts(paths, tcfg.train_docs), out, vocab_size=tcfg.vocab_size,
        min_frequency=tcfg.min_frequency, eos_token=tcfg.eos_token,
        extra_config={"train_docs": tcfg.train_docs, "trained_on": [str(p) for p in paths]},
    )
    return tok


def tokenize(cfg: ExperimentConfig, verify: bool = False, progress: bool = True) -> dict:
    """Tokenizer + shards for a config; returns the manifest (see `shared.data.build`)."""
    from shared.data.build import build_shards

    paths = document_paths(cfg)
    tok = ensure_tokenizer(cfg, paths)
    m = cfg.mixture
    if m.use_ray:
        _ensure_ray(cfg)
    return build_shards(
        paths, tok, m.shard_dir, docs_per_shard=m.docs_per_shard, use_ray=m.use_ray, workers=m.workers,
        cpus_per_worker=m.cpus_per_worker, verify=verify, progress=progress,
    )


def _ensure_ray(cfg: ExperimentConfig) -> None:
    import ray

    if not ray.is_initialized():
        c = cfg.cluster
        kwargs = {"address": c.address} if c.address else {"num_cpus": c.num_cpus, "include_dashboard": False}
        ray.init(namespace=c.namespace, log_to_driver=False, configure_logging=False, **kwargs)


def open_mixture(cfg: ExperimentConfig):
    """The config's mixture over `mixture.shard_dir` with `train.seq_len` and `train.seed`."""
    from shared.data.mixture import Mixture

    m = cfg.mixture
    return Mixture.from_shards(
        m.shard_dir, m.rates, cfg.train.seq_len, seed=cfg.train.seed, on_exhausted=m.on_exhausted, verify=m.verify
    )


def make_loader(cfg: ExperimentConfig, rank: int = 0, world_size: int = 1):
    """Batches of `train.micro_batch_size` sequences for one data-parallel rank (see `loader`)."""
    from shared.data.loader import MixtureLoader

    return MixtureLoader(
        open_mixture(cfg), cfg.train.micro_batch_size, rank=rank, world_size=world_size,
        doc_boundaries=cfg.mixture.doc_boundaries,
    )
