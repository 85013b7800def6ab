"""Token shards: flat token arrays (`.bin`) with document offsets (`.idx`) and a `manifest.json`.

Format (version `moelab-tokens/1`), one folder per source under the shard root:

- `<source>/<name>.bin`: the documents' token ids back to back, raw little-endian uint16 when the
  vocabulary fits in 16 bits, else uint32; no separators (packing inserts them), no header, so the
  file memory-maps straight into a numpy array.
- `<source>/<name>.idx`: int64 offsets, one per document plus a final one (document i is
  `bin[idx[i]:idx[i+1]]`); the same layout as Megatron/nanoGPT-style indexed datasets.
- `manifest.json` at the root: the tokenizer (hash, vocab, separator id, dtype), every shard with
  its source, document and token counts and the sha256 of both files, and totals per source.

Why sha256 in the manifest: a shard is read by memory map, so a flipped byte would otherwise be
trained on silently. `verify_shards(..., full=True)` recomputes every checksum; the cheap default
checks file sizes, which already catches truncated copies.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from shared.data.atomic import atomic_write_array

FORMAT = "moelab-tokens/1"
MANIFEST = "manifest.json"


class ShardError(ValueError):
    """A shard folder that cannot be read: no manifest, wrong format, missing or corrupted files."""


@dataclass(frozen=True)
class ShardInfo:
    """One shard's entry in the manifest; `name` is its path below the root, without extension."""

    name: str
    source: str
    docs: int
    tokens: int
    dtype: str
    bin_sha256: str
    idx_sha256: str
    tokenizer_hash: str = ""

    def paths(self, root: str | Path) -> tuple[Path, Path]:
        base = Path(root) / self.name
        return base.with_name(base.name + ".bin"), base.with_name(base.name + ".idx")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ShardInfo:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _sha256_array(array: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def pack_documents(docs: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate token lists into (tokens, offsets) without a Python loop per token."""
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter(itertools.chain.from_iterable(docs), dtype=dtype, count=int(offsets[-1]))
    return tokens, offsets


def write_shard(
    root: str | Path, name: str, source: str, tokens: np.ndarray, offsets: np.ndarray, tokenizer_hash: str = ""
) -> ShardInfo:
    """Write `<root>/<name>.bin` and `.idx` atomically and return the manifest entry."""
    if offsets.dtype != np.int64 or offsets[0] != 0 or offsets[-1] != len(tokens):
        raise ShardError(f"shard {name}: offsets must be int64 from 0 to len(tokens)={len(tokens)}")
    info = ShardInfo(
        name=name,
        source=source,
        docs=len(offsets) - 1,
        tokens=len(tokens),
        dtype=tokens.dtype.name,
        bin_sha256=_sha256_array(tokens),
        idx_sha256=_sha256_array(offsets),
        tokenizer_hash=tokenizer_hash,
    )
    bin_path, idx_path = info.paths(root)
    atomic_write_array(bin_path, tokens)
    atomic_write_array(idx_path, offsets)
    return info


class Shard:
    """A memory-mapped shard: `doc(i)` is a zero-copy view of document i's tokens."""

    def __init__(self, root: str | Path, info: ShardInfo, verify: str = "size"):
        self.info = info
        verify_shard(root, info, full=verify == "full")
        bin_path, idx_path = info.paths(root)
        dtype = np.dtype(info.dtype)
        if info.tokens:
            self.tokens = np.memmap(bin_path, dtype=dtype, mode="r", shape=(info.tokens,))
        else:
            self.tokens = np.zeros(0, dtype=dtype)
        self.offsets = np.fromfile(idx_path, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


def verify_shard(root: str | Path, info: ShardInfo, full: bool = True) -> None:
    """Raise `ShardError` naming the file when a shard is missing, truncated or (full) corrupted."""
    itemsize = np.dtype(info.dtype).itemsize
    expected = ((".bin", info.tokens * itemsize, info.bin_sha256), (".idx", (info.docs + 1) * 8, info.idx_sha256))
    for path, (suffix, size, digest) in zip(info.paths(root), expected, strict=True):
        fix = "rerun `moelab data tokenize CONFIG --verify` to rebuild it"
        if not path.is_file():
            raise ShardError(f"shard file missing: {path}; {fix}")
        actual = path.stat().st_size
        if actual != size:
            raise ShardError(f"shard {suffix} has {actual} bytes, manifest says {size}: {path}; {fix}")
        if full:
            got = sha256_file(path)
            if got != digest:
                raise ShardError(
                    f"shard checksum mismatch for {path}: sha256 {got[:16]}… != manifest {digest[:16]}…; "
                    f"the file is corrupted; {fix}"
                )


def read_manifest(root: str | Path) -> dict:
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise ShardError(f"no {MANIFEST} in {root}: build the shards first with `moelab data tokenize CONFIG`")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise ShardError(f"{path}: format {manifest.get('format')!r}, this reader understands {FORMAT!r}")
    return manifest


def manifest_shards(manifest: dict) -> list[ShardInfo]:
    return [ShardInfo.from_dict(d) for d in manifest["shards"]]


def verify_shards(root: str | Path, full: bool = True) -> list[str]:
    """Check every shard of a manifest; return one message per bad shard (empty list when all good)."""
    problems = []
    for info in manifest_shards(read_manifest(root)):
        try:
            verify_shard(root, info, full=full)
        except ShardError as exc:
            problems.append(str(exc))
    return problems
