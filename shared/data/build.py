"""Build token shards from document Parquet files (`id`, `text`, `source`, any score columns).

Work is split into items (one Parquet file's consecutive row groups, up to `docs_per_shard`
rows). Each item is tokenized by a Ray Data task (the tokenizer is loaded once per worker process) and
written as one shard per source found in it, then an item record `items/<item>.json` is written
last, atomically: that record is the completion marker. A rerun skips every item whose record
exists, whose input file has the same size and mtime, and whose shard files have the sizes the
record gives (with `verify=True`, the full sha256 too, rebuilding any that fail). Finally the
manifest is assembled from the records, so it always describes exactly the finished shards.

Bad input is counted, never dropped silently: rows with a null `text` or `source` and documents
that tokenize to zero tokens are skipped and counted per reason in the record and the manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from shared.data.atomic import atomic_write_json
from shared.data.shards import (
    FORMAT,
    MANIFEST,
    ShardError,
    ShardInfo,
    pack_documents,
    verify_shard,
    write_shard,
)
from shared.data.tokenizer import MoeTokenizer, load_tokenizer

ITEMS_DIR = "items"
SOURCE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
REQUIRED_COLUMNS = ("text", "source")

log = logging.getLogger(__name__)


def _fingerprint(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def plan_items(paths: Iterable[str | Path], docs_per_shard: int) -> list[dict]:
    """Split input files into work items of whole row groups, ≤ `docs_per_shard` rows where possible."""
    import pyarrow.parquet as pq

    items = []
    for raw in sorted({str(Path(p).resolve()) for p in paths}):
        path = Path(raw)
        meta = pq.ParquetFile(path).metadata
        names = set(meta.schema.names)
        missing = [c for c in REQUIRED_COLUMNS if c not in names]
        if missing:
            raise ShardError(f"{path}: missing column(s) {missing}; documents need columns 'id', 'text', 'source'")
        tag = hashlib.sha1(raw.encode()).hexdigest()[:8]
        groups: list[int] = []
        rows = 0
        for rg in range(meta.num_row_groups):
            n = meta.row_group(rg).num_rows
            if groups and rows + n > docs_per_shard:
                items.append(_item(path, tag, groups))
                groups, rows = [], 0
            groups.append(rg)
            rows += n
        if groups:
            items.append(_item(path, tag, groups))
    return items


def _item(path: Path, tag: str, groups: list[int]) -> dict:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)[:48]
    return {"id": f"{stem}-{tag}-rg{groups[0]:05d}", "row_groups": groups, "input": _fingerprint(path)}


def tokenize_item(item: dict, tok: MoeTokenizer, root: Path, encode_batch_docs: int = 2048) -> dict:
    """Tokenize one item into one shard per source and write its record (the completion marker)."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(item["input"]["path"]).read_row_groups(item["row_groups"], columns=list(REQUIRED_COLUMNS))
    texts = table.column("text").to_pylist()
    sources = table.column("source").to_pylist()
    skipped: Counter[str] = Counter()
    by_source: dict[str, list[str]] = {}
    for text, source in zip(texts, sources, strict=True):
        if text is None:
            skipped["null_text"] += 1
        elif source is None:
            skipped["null_source"] += 1
        elif not SOURCE_NAME.match(source):
            skipped["bad_source_name"] += 1
        else:
            by_source.setdefault(source, []).append(text)
    shards = []
    for source in sorted(by_source):
        docs: list[list[int]] = []
        batch = by_source[source]
        for start in range(0, len(batch), encode_batch_docs):
            docs.extend(tok.encode_batch(batch[start : start + encode_batch_docs]))
        kept = [d for d in docs if d]
        skipped["empty_after_tokenize"] += len(docs) - len(kept)
        if not kept:
            continue
        tokens, offsets = pack_documents(kept, tok.dtype)
        shards.append(write_shard(root, f"{source}/{item['id']}", source, tokens, offsets, tok.hash).to_dict())
    record = {
        "id": item["id"],
        "input": item["input"],
        "row_groups": item["row_groups"],
        "tokenizer_hash": tok.hash,
        "rows": len(texts),
        "skipped": {k: v for k, v in sorted(skipped.items()) if v},
        "shards": shards,
    }
    atomic_write_json(root / ITEMS_DIR / f"{item['id']}.json", record)
    return record


def _record_if_done(root: Path, item: dict, tok_hash: str, verify: bool) -> dict | None:
    path = root / ITEMS_DIR / f"{item['id']}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("input") != item["input"] or record.get("tokenizer_hash") != tok_hash:
        return None
    try:
        for shard in record["shards"]:
            verify_shard(root, ShardInfo.from_dict(shard), full=verify)
    except ShardError:
        return None
    return record


_TOKENIZERS: dict[tuple[str, str], MoeTokenizer] = {}


def _cached_tokenizer(path: str, eos_token: str, expected_hash: str) -> MoeTokenizer:
    """Load a tokenizer once per worker process (Ray reuses workers across tasks)."""
    key = (path, expected_hash)
    if key not in _TOKENIZERS:
        tok = load_tokenizer(path, eos_token=eos_token)
        if tok.hash != expected_hash:
            raise ShardError(f"{path} changed during the build (sha256 {tok.hash[:12]}… != {expected_hash[:12]}…)")
        _TOKENIZERS[key] = tok
    return _TOKENIZERS[key]


def _tokenize_batch(batch: dict[str, np.ndarray], tokenizer_path: str, eos_token: str, tokenizer_hash: str,
                    root: str) -> dict[str, list[str]]:
    """Ray Data task: tokenize the items of one batch (one item per batch) into shards."""
    tok = _cached_tokenizer(tokenizer_path, eos_token, tokenizer_hash)
    records = [tokenize_item(json.loads(s), tok, Path(root)) for s in batch["item"]]
    return {"record": [json.dumps(r) for r in records]}


def _run_ray(todo: list[dict], tok: MoeTokenizer, root: Path, workers: int, cpus_per_worker: float) -> list[dict]:
    """Tasks rather than an actor pool: Ray keeps worker processes warm between tasks and the
    tokenizer is cached per process, so there is no per-build actor start-up to pay."""
    import ray.data

    ds = ray.data.from_items([{"item": json.dumps(it)} for it in todo], override_num_blocks=len(todo))
    ds = ds.map_batches(
        _tokenize_batch,
        fn_kwargs={"tokenizer_path": str(tok.path), "eos_token": tok.eos_token, "tokenizer_hash": tok.hash,
                   "root": str(root)},
        batch_size=1,
        compute=ray.data.TaskPoolStrategy(size=max(1, min(workers, len(todo)))),
        num_cpus=cpus_per_worker,
    )
    return [json.loads(row["record"]) for row in ds.take_all()]


def _run_local(todo: list[dict], tok: MoeTokenizer, root: Path, progress: bool) -> list[dict]:
    from tqdm import tqdm

    return [tokenize_item(it, tok, root) for it in tqdm(todo, desc="tokenize", unit="item", disable=not progress)]


def build_shards(
    inputs: Sequence[str | Path],
    tokenizer: MoeTokenizer,
    root: str | Path,
    docs_per_shard: int = 50_000,
    use_ray: bool = True,
    workers: int = 2,
    cpus_per_worker: float = 0.5,
    verify: bool = False,
    progress: bool = True,
) -> dict:
    """Tokenize `inputs` into shards under `root` and write `manifest.json`; return the manifest.

    Refuses to add shards to a folder whose manifest names another tokenizer folder (mixing
    vocabularies would train on garbage; the folder is probably the wrong `shard_dir`): use a new
    `shard_dir` or delete the old one. The same tokenizer folder holding a retrained tokenizer
    (its documents or settings changed, see `prepare.ensure_tokenizer`) is not another tokenizer:
    every item is rebuilt with it (item records carry the tokenizer hash), and the reason is logged.
    """
    out = Path(root)
    if not inputs:
        raise ShardError("no input Parquet files given: set mixture.documents to a glob that matches the filtered data")
    old = out / MANIFEST
    if old.is_file():
        was = json.loads(old.read_text(encoding="utf-8")).get("tokenizer", {})
        old_hash = was.get("hash")
        if old_hash not in (None, tokenizer.hash):
            if was.get("path") != str(tokenizer.path):
                raise ShardError(
                    f"{old} was built with tokenizer {old_hash[:12]}… ({was.get('path')}), not {tokenizer.hash[:12]}… "
                    f"({tokenizer.path}); use a new mixture.shard_dir or delete the old one"
                )
            log.warning("token shards in %s: the tokenizer in %s was retrained (%s… -> %s…); rebuilding every item",
                        out, tokenizer.path, old_hash[:12], tokenizer.hash[:12])
    t0 = time.perf_counter()
    items = plan_items(inputs, docs_per_shard)
    done = {it["id"]: r for it in items if (r := _record_if_done(out, it, tokenizer.hash, verify)) is not None}
    todo = [it for it in items if it["id"] not in done]
    if todo:
        new = _run_ray(todo, tokenizer, out, workers, cpus_per_worker) if use_ray else _run_local(todo, tokenizer, out, progress)
        done.update({r["id"]: r for r in new})
    records = [done[it["id"]] for it in items]
    manifest = assemble_manifest(records, tokenizer)
    manifest["build"] = {
        "items": len(items),
        "items_built": len(todo),
        "items_skipped": len(items) - len(todo),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    atomic_write_json(out / MANIFEST, manifest)
    return manifest


def assemble_manifest(records: list[dict], tokenizer: MoeTokenizer) -> dict:
    shards = [s for r in records for s in r["shards"]]
    sources: dict[str, dict] = {}
    for s in shards:
        entry = sources.setdefault(s["source"], {"shards": 0, "docs": 0, "tokens": 0})
        entry["shards"] += 1
        entry["docs"] += s["docs"]
        entry["tokens"] += s["tokens"]
    skipped: Counter[str] = Counter()
    for r in records:
        skipped.update(r["skipped"])
    return {
        "format": FORMAT,
        "tokenizer": tokenizer.describe(),
        "inputs": sorted({r["input"]["path"] for r in records}),
        "rows": sum(r["rows"] for r in records),
        "docs": sum(s["docs"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "skipped": dict(sorted(skipped.items())),
        "sources": dict(sorted(sources.items())),
        "shards": sorted(shards, key=lambda s: s["name"]),
    }
