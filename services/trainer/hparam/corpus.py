"""A small real-text corpus for CPU proxies: Python's reference manual (`pydoc_data`, ships with Python).

About 0.8 MB of English technical prose in ~190 topics, always installed, so the CPU example and
its tests need no download. The last 8 topics are held out for the eval loss the sweeps rank by.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HELD_OUT = 8


def _write(folder: Path, texts: list[str], source: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [f"{source}-{i}" for i in range(len(texts))], "text": texts, "source": [source] * len(texts)})
    tmp = folder / "part-0.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / "part-0.parquet")
    return str(folder / "*.parquet")


def pydoc_corpus_overrides(root: str | os.PathLike, vocab_size: int = 512) -> list[str]:
    """Write the corpus under `root` and return the config overrides that train on it there."""
    from pydoc_data.topics import topics

    root = Path(root).resolve()
    texts = [t for _, t in sorted(topics.items()) if len(t) > 200]
    train = _write(root / "docs" / "train", texts[:-HELD_OUT], "web")
    held_out = _write(root / "docs" / "eval", texts[-HELD_OUT:], "web")
    return [
        f"mixture.documents=[{train}]", f"mixture.eval_documents=[{held_out}]", "mixture.use_ray=false", "mixture.rates={}",
        f"mixture.shard_dir={root}/tokens", f"mixture.tokenizer.out_dir={root}/tokenizer",
        f"mixture.tokenizer.vocab_size={vocab_size}", f"model.vocab_size={vocab_size}",
    ]
