"""What a finished stage declares as its output: the files its `manifest.json` lists, nothing else.

Why a manifest and not a glob: a stage's folder also holds its work files (the data filter keeps
per-unit results, pre-dedup, under `work/units/`) and, after a rerun with fewer shards, it may
hold leftovers. A reader that globbed the folder would take duplicated and removed documents for
kept ones. The manifest is written last, so its presence also means the stage finished, and it
gives each file's size, which is checked here so a truncated or swapped file is refused, not read.

A manifest lists its files under `shards`, each either a name or a mapping with `name` (a path
relative to the folder) and, optionally, `bytes`.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

MANIFEST = "manifest.json"


class StageOutputError(FileNotFoundError):
    """A stage's declared output cannot be read: no manifest, or a listed file missing or changed."""


def declared_outputs(folder: str | Path, what: str = "the data filter", how: str = "moelab data filter CONFIG") -> list[Path]:
    """The files `folder/manifest.json` lists, in manifest order, each checked to exist (and to have
    the size the manifest gives). `what` and `how` name the stage and the command that makes it."""
    root = Path(folder)
    path = root / MANIFEST
    if not path.is_file():
        raise StageOutputError(f"{path} not found: {what} has not finished in {root}; run `{how}` first "
                               "(a stage reads only the files another stage declares in its manifest)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        entries = manifest["shards"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise StageOutputError(f"{path}: not a stage manifest with a 'shards' list ({exc}); rerun `{how}`") from None
    files: list[Path] = []
    for entry in entries:
        name = entry if isinstance(entry, str) else entry["name"]
        file = root / name
        if not file.is_file():
            raise StageOutputError(f"{file} is listed in {path} but missing; rerun `{how}`")
        size = None if isinstance(entry, str) else entry.get("bytes")
        if size is not None and file.stat().st_size != size:
            raise StageOutputError(f"{file} has {file.stat().st_size} bytes, {path} says {size}: it changed after "
                                   f"the stage finished; rerun `{how}`")
        files.append(file)
    return files


def resolve_documents(patterns: list[str], default_folder: str | Path) -> list[Path]:
    """Parquet document files named by `patterns`, or the declared output of `default_folder` when
    there are none. A pattern that names a folder holding a manifest means that folder's declared
    output; any other pattern is a file glob (`**` allowed) whose matches are taken as given."""
    if not patterns:
        return declared_outputs(default_folder)
    files: set[Path] = set()
    for pattern in patterns:
        if (Path(pattern) / MANIFEST).is_file():
            files.update(declared_outputs(pattern))
        else:
            files.update(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
    return sorted(files)
