"""Config-driven entry points: tokenize the documents a config names and open its mixture.

These are what `moelab data tokenize|mixture-stats`, the pipeline job and the trainer call, so
that the path from `ExperimentConfig` to shards and batches is written once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from shared.config import ExperimentConfig
from shared.data.shards import ShardError
from shared.data.stage_outputs import StageOutputError, resolve_documents
from shared.data.tokenizer import CONFIG_FILE, MoeTokenizer, load_tokenizer, train_tokenizer

log = logging.getLogger(__name__)


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


def documents_sha256(paths: list[Path], limit: int) -> str:
    """sha256 of the texts a tokenizer would be trained on (the first `limit`, in order): what a
    trained tokenizer is keyed on besides its settings, so that other documents retrain it."""
    h = hashlib.sha256()
    n = 0
    for text in iter_texts(paths, limit):
        data = text.encode("utf-8", errors="surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
        n += 1
    h.update(n.to_bytes(8, "little"))
    return h.hexdigest()


def ensure_tokenizer(cfg: ExperimentConfig, paths: list[Path] | None = None) -> MoeTokenizer:
    """Load `tokenizer.path`, or reuse the tokenizer in `tokenizer.out_dir` when it was trained with the
    same settings on the same documents, or train one on the documents (a rerun keeps the same hash).

    "Same documents" means the same texts (a sha256 of the first `train_docs` of them), not the same
    file names: a filter rerun that kept other documents retrains the tokenizer, and the token
    shards, keyed on the tokenizer's hash, follow. The reason is logged.
    """
    tcfg = cfg.mixture.tokenizer
    if tcfg.path:
        return load_tokenizer(tcfg.path, eos_token=tcfg.eos_token)
    out = Path(tcfg.out_dir)
    paths = paths if paths is not None else document_paths(cfg)
    wanted = {"vocab_size": tcfg.vocab_size, "min_frequency": tcfg.min_frequency, "eos_token": tcfg.eos_token,
              "train_docs": tcfg.train_docs, "documents_sha256": documents_sha256(paths, tcfg.train_docs)}
    meta_file = out / CONFIG_FILE
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        changed = [k for k, v in wanted.items() if meta.get(k) != v]
        if not changed:
            return load_tokenizer(out, eos_token=tcfg.eos_token)
        why = ("its training documents changed" if changed == ["documents_sha256"]
               else "its settings changed (" + ", ".join(f"{k}: {meta.get(k)} -> {wanted[k]}" for k in changed
                                                         if k != "documents_sha256") + ")")
        log.warning("retraining the tokenizer in %s: %s; token shards built with the old one (%s…) are rebuilt, "
                    "and a run trained with it no longer matches this folder (use a new mixture.tokenizer.out_dir "
                    "to keep both)", out, why, str(meta.get("sha256"))[:12])
    return train_tokenizer(
        iter_texts(paths, tcfg.train_docs), out, vocab_size=tcfg.vocab_size,
        min_frequency=tcfg.min_frequency, eos_token=tcfg.eos_token,
        extra_config={"train_docs": tcfg.train_docs, "documents_sha256": wanted["documents_sha256"],
                      "trained_on": [str(p) for p in paths]},
    )


def tokenize(cfg: ExperimentConfig, verify: bool = False, progress: bool = True,
             tokenizer: MoeTokenizer | None = None) -> dict:
    """Tokenizer + shards for a config; returns the manifest (see `shared.data.build`).

    `tokenizer`, when given, is used as is: held-out documents are tokenized with the training
    documents' tokenizer, never one trained on themselves."""
    from shared.data.build import build_shards

    paths = document_paths(cfg)
    tok = tokenizer if tokenizer is not None else ensure_tokenizer(cfg, paths)
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
