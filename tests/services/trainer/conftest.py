"""A tiny training setup on real text: Python's reference manual (pydoc_data) as Parquet documents."""

from __future__ import annotations

from pathlib import Path
from pydoc_data.topics import topics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shared.config import load_config

ROOT = Path(__file__).resolve().parents[3]


def write_docs(folder: Path, texts: list[str], source: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [f"{source}-{i}" for i in range(len(texts))], "text": texts, "source": [source] * len(texts)})
    pq.write_table(table, folder / "part-0.parquet")
    return str(folder / "*.parquet")


@pytest.fixture(scope="session")
def doc_globs(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    texts = [t for _, t in sorted(topics.items()) if len(t) > 200]
    train = write_docs(root / "train", texts[:-8], "web")
    held_out = write_docs(root / "eval", texts[-8:], "web")
    return train, held_out


def tiny_cfg(tmp_path: Path, doc_globs, *overrides: str, recipe: Path = ROOT / "configs" / "tiny.yaml"):
    train, held_out = doc_globs
    base = [
        f"mixture.documents=[{train}]", f"mixture.eval_documents=[{held_out}]", "mixture.use_ray=false", "mixture.rates={}",
        f"mixture.shard_dir={tmp_path}/tokens", f"mixture.tokenizer.out_dir={tmp_path}/tok",
        "mixture.tokenizer.vocab_size=512", "model.vocab_size=512", "train.seq_len=64", "train.micro_batch_size=4",
        "train.grad_accum=1", "train.steps=6", "train.eval_every=3", "train.eval_batches=1", "train.checkpoint_every=3",
        f"train.out_dir={tmp_path}/runs", "tracker.mode=disabled", "optim.warmup_steps=2", "model.max_seq_len=64",
        # the in-loop suite has its own tests (test_eval_suite.py); elsewhere it only adds seconds per eval
        "train.eval_suite.enabled=false",
    ]
    return load_config(recipe, [*base, *overrides])
