"""What a rerun into an existing `out_dir` may keep, and what a changed input or setting rebuilds.

A filter output is keyed on its inputs and settings, never on "the folder exists". The plan
(`work/plan.json`) records a hash of the settings and, per work unit, the unit itself (file,
byte range or row group, first line) with a sha256 of the bytes it reads. On a rerun:

- same settings and units: everything finished is kept (a killed run resumes);
- an input changed (appended, edited, added, removed): the units whose bytes or position changed
  are redone, the others kept; dedup, the fitted filters and the shards depend on every unit, so
  they are always redone;
- a filter setting changed: every unit is redone.

The old `manifest.json` goes first, so while the rebuild runs no later stage can read shards that
no longer match the inputs (a reader refuses a folder without a manifest). The reason is logged
and stored in stats.json (`rebuilt`).

Why hash the bytes and not trust size and mtime: a `ray job submit --working-dir` copy has fresh
mtimes on every submission, and an edit can keep a file's size. Hashing reads each input once per
run, far cheaper than filtering it.

One case is refused rather than rebuilt: an input file inside `out_dir` (say, an earlier output
filtered again into its own folder), which the rebuild would delete or overwrite while reading it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from services.data_filter.io.readers import Unit
from services.data_filter.io.writer import write_json

log = logging.getLogger(__name__)

PLAN = "plan.json"
_BLOCK = 1 << 22


class RunMismatch(RuntimeError):
    """out_dir cannot be rebuilt in place; the message names the command to run instead."""


def unit_sha256(unit: Unit, whole_file: dict[str, str]) -> str:
    """sha256 of the bytes `unit` reads: its byte range of a plain JSONL file, else the whole file
    (a compressed stream or a Parquet row group cannot be read apart from its file)."""
    if unit.fmt == "jsonl":
        return _hash_range(unit.path, unit.start, unit.end)
    if unit.path not in whole_file:
        whole_file[unit.path] = _hash_range(unit.path, 0, -1)
    return whole_file[unit.path]


def _hash_range(path: str, start: int, end: int) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            left = end - start if end >= 0 else None
            while left is None or left > 0:
                block = fh.read(_BLOCK if left is None else min(_BLOCK, left))
                if not block:
                    break
                h.update(block)
                if left is not None:
                    left -= len(block)
    except OSError as exc:  # the reader reports an unreadable file as a reject; key it as such
        h.update(f"unreadable:{type(exc).__name__}".encode())
    return h.hexdigest()


def make_plan(settings_hash: str, units: list[Unit]) -> dict[str, Any]:
    whole_file: dict[str, str] = {}
    return {"settings": settings_hash,
            "units": [{**dataclasses.asdict(u), "sha256": unit_sha256(u, whole_file)} for u in units]}


def plan_fingerprint(plan: dict[str, Any]) -> str:
    """The output's key: settings and every unit's position and bytes."""
    return hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()


def refuse_inputs_inside(out: Path, units: list[Unit]) -> None:
    root = os.path.realpath(out)
    inside = sorted({u.path for u in units if os.path.realpath(u.path).startswith(root + os.sep)})
    if inside:
        raise RunMismatch(
            f"{inside[0]} is an input inside out_dir {out}: rebuilding there would overwrite what it reads; "
            f"write elsewhere: `moelab data filter CONFIG data.out_dir={out}-2`"
        )


def reconcile(out: Path, work: Path, plan: dict[str, Any], unit_files) -> str | None:
    """Bring `work` in line with `plan`, deleting what no longer matches; write the plan. Return the
    reason a previous run's output is being rebuilt, or None when there was none or nothing changed.

    `unit_files(index)` gives the work files of one unit (see `worker.unit_paths`)."""
    plan_file = work / PLAN
    old = json.loads(plan_file.read_text(encoding="utf-8")) if plan_file.is_file() else None
    if old == plan:
        return None
    if old is None:
        if (out / "manifest.json").is_file() or any(out.glob("part-*.parquet")):
            reason = f"{out} holds shards without a plan of the inputs they came from: rebuilding all of it"
            _clear_output(out, work, stale_units=None)
            log.warning("data filter: %s", reason)
            write_json(plan, plan_file)
            return reason
        write_json(plan, plan_file)
        return None
    if old.get("settings") != plan["settings"] or "units" not in old:
        reason = "the filter settings changed since the last run: every unit is filtered again"
        stale = None
    else:
        before = {u["index"]: u for u in old["units"]}
        stale = {u["index"] for u in plan["units"] if before.get(u["index"]) != u}
        stale |= {i for i in before if i >= len(plan["units"])}
        reason = f"the inputs changed since the last run: {_describe(old['units'], plan['units'])}; " \
                 f"{len(stale)} of {len(plan['units'])} units, dedup, fitted filters and shards are rebuilt"
    log.warning("data filter: %s", reason)
    _clear_output(out, work, stale, unit_files)
    write_json(plan, plan_file)
    return reason


def _describe(old: list[dict], new: list[dict]) -> str:
    """Which input files were added, removed or changed, in a line."""
    def by_file(units):
        files: dict[str, list] = {}
        for u in units:
            files.setdefault(u["path"], []).append((u["start"], u["end"], u["sha256"]))
        return files

    a, b = by_file(old), by_file(new)
    parts = [f"{p} added" for p in b if p not in a] + [f"{p} removed" for p in a if p not in b]
    parts += [f"{p} changed" for p in b if p in a and a[p] != b[p]]
    return ", ".join(parts) or "units moved"


def _clear_output(out: Path, work: Path, stale_units: set[int] | None, unit_files=None) -> None:
    """Remove the manifest first (no reader may take the old shards as current), then the shards,
    the run-wide work (dedup map, fitted pass) and the work of `stale_units` (None: every unit)."""
    (out / "manifest.json").unlink(missing_ok=True)
    for shard in out.glob("part-*.parquet"):
        shard.unlink()
    (work / "dedup.json").unlink(missing_ok=True)
    (work / "fitted.json").unlink(missing_ok=True)
    units = work / "units"
    if stale_units is None:
        shutil.rmtree(units, ignore_errors=True)
        return
    for fitted in units.glob("*.fitted.json"):
        fitted.unlink()
    for index in stale_units:
        files = unit_files(index)
        files["stats"].unlink(missing_ok=True)  # first: it marks the unit finished
        for path in files.values():
            path.unlink(missing_ok=True)
