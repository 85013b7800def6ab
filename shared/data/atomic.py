"""Atomic file writes: a temp file in the same folder, fsync, then `os.replace`.

Why: a killed run must never leave a half-written shard or manifest that a rerun takes for a
finished one (nothing lost, nothing half-written). `os.replace` is atomic within one file system, which is all a
killed process needs. `durable=True` also fsyncs before the rename, for files whose loss after an
OS crash would go unnoticed (completion records, manifests). Bulk shard data skips the fsync (it
cost ~10% of shard-building time in benchmarks/tokenize.py) because a rerun checks every shard's
size against its fsynced record, and `--verify` its sha256, so a shard lost in a crash is rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np


@contextlib.contextmanager
def _atomic_file(path: str | Path, durable: bool) -> Iterator[BinaryIO]:
    """A binary file handle whose content replaces `path` only if the block completes."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes, durable: bool = True) -> None:
    with _atomic_file(path, durable) as fh:
        fh.write(data)


def atomic_write_array(path: str | Path, array: np.ndarray, durable: bool = False) -> None:
    """Write an array's raw bytes (C order, no header): the memory-mappable shard format."""
    with _atomic_file(path, durable) as fh:
        np.ascontiguousarray(array).tofile(fh)


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))
