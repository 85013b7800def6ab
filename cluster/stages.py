"""Content-addressed pipeline stages: a stage reruns only when its inputs or its config changed.

Each stage has a key: the sha256 of the config slice it reads, the keys of the stages it depends
on and, for the first stage, the fingerprints of the raw input files. A finished stage writes
`stages/<name>.json` (key, report, seconds) atomically; a rerun with the same key skips it and
reuses the report. A changed key clears the stage's outputs first (so a stage never resumes on
top of results made under other settings) and, through key chaining, reruns everything after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def file_fingerprints(paths: list[str], edge: int = 1 << 20) -> list[tuple[str, int, str]]:
    """(path as given, size, sha256 of the first and last MiB) of every file.

    Content, not mtime: `ray job submit --working-dir` unpacks a fresh copy with new mtimes on every
    submission, and a rerun must still recognise unchanged inputs. Hashing only the edges keeps it
    cheap for large corpora while catching any append, truncation or rewrite of a file's ends.
    """
    out = []
    for p in sorted(paths):
        size = os.path.getsize(p)
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            h.update(fh.read(edge))
            if size > edge:
                fh.seek(max(edge, size - edge))
                h.update(fh.read(edge))
        out.append((p, size, h.hexdigest()))
    return out


@dataclass
class Stage:
    name: str
    run: Callable[[], dict[str, Any]]
    config: Any  # the JSON-able slice of the config this stage reads
    after: tuple[str, ...] = ()
    outputs: tuple[Path, ...] = ()  # cleared when the stage must rerun
    extra_key: Any = None  # e.g. input file fingerprints


@dataclass
class StageResult:
    name: str
    key: str
    report: dict[str, Any]
    seconds: float
    skipped: bool


@dataclass
class StageRunner:
    root: Path
    on_start: Callable[[str], None] = lambda name: None
    on_done: Callable[[StageResult], None] = lambda result: None
    results: dict[str, StageResult] = field(default_factory=dict)

    def manifest_path(self, name: str) -> Path:
        return self.root / "stages" / f"{name}.json"

    def key_of(self, stage: Stage) -> str:
        upstream = [self.results[a].key for a in stage.after]
        return digest({"stage": stage.name, "config": stage.config, "after": upstream, "extra": stage.extra_key})

    def run(self, stage: Stage) -> StageResult:
        key = self.key_of(stage)
        path = self.manifest_path(stage.name)
        if path.is_file():
            done = json.loads(path.read_text())
            if done.get("key") == key:
                result = StageResult(stage.name, key, done["report"], done["seconds"], skipped=True)
                self.results[stage.name] = result
                self.on_done(result)
                return result
        for out in stage.outputs:
            if out.is_dir():
                shutil.rmtree(out)
            elif out.exists():
                out.unlink()
        path.unlink(missing_ok=True)
        self.on_start(stage.name)
        t0 = time.perf_counter()
        report = stage.run()
        seconds = time.perf_counter() - t0
        result = StageResult(stage.name, key, report, seconds, skipped=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "report": report, "seconds": seconds,
                                   "finished": time.time()}, indent=2, default=str))
        os.replace(tmp, path)
        self.results[stage.name] = result
        self.on_done(result)
        return result
