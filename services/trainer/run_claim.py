"""Which run a `moelab train` continues or starts: never two runs in one folder.

A run folder (`train.out_dir/<run_name or name>`) that already holds a run (a saved config,
metrics or checkpoints) is refused unless the user says which they mean: `--resume` continues it,
`--new` starts a fresh run beside it under the first free suffixed name (`tiny-2`, `tiny-3`, …).
Starting over in place would append a second curve to the first's metrics, and a later `--resume`
would continue the old run's checkpoint.

A resume whose config differs from the saved one in a field that shapes the run (the schedule,
the model, the data, the optimizer) is refused unless `--allow-config-change`: the LR schedule is
recomputed from `train.steps`, so a changed value silently bends the curve. An allowed change is
recorded beside `config.yaml` (`config-changes.jsonl`: the step resumed from, each field's old and
new value) and logged, before the new config overwrites `config.yaml`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import yaml

from services.trainer.checkpoint import PREFIX
from shared.config import ExperimentConfig

log = logging.getLogger(__name__)

# Sections whose change alters what a resumed run computes; tracker and cluster do not.
RUN_SHAPING = ("model", "optim", "train", "mixture", "data")
# Fields of those sections that only say where or how fast the work runs.
NOT_RUN_SHAPING = {"train.workers", "train.dp_size", "train.device", "train.checkpoint_every", "train.keep_last",
                   "train.eval_every", "train.log_every", "train.hist_every", "train.out_dir", "train.run_name",
                   "train.max_bad_steps", "mixture.workers", "mixture.cpus_per_worker", "mixture.use_ray",
                   "data.filter.workers", "data.filter.actor_cpus", "data.filter.ray_address"}
CHANGES_FILE = "config-changes.jsonl"


class RunClaimError(RuntimeError):
    """The run folder holds another run, or a resume would change the run's shape unasked."""


def run_folder(cfg: ExperimentConfig) -> Path:
    return Path(cfg.train.out_dir) / (cfg.train.run_name or cfg.name)


def holds_run(folder: Path) -> bool:
    return any((folder / f).exists() for f in ("config.yaml", "metrics.jsonl", "checkpoints"))


def claim_run(cfg: ExperimentConfig, resume: bool = False, new: bool = False,
              allow_config_change: bool = False) -> ExperimentConfig:
    """The config to train with (its `train.run_name` set to a free name with `new`), after the
    checks in the module docstring; raises `RunClaimError` naming the folder and the way out."""
    if resume and new:
        raise RunClaimError("--resume continues the existing run and --new starts another: choose one")
    folder = run_folder(cfg)
    if new:
        if not holds_run(folder):
            return cfg
        base = cfg.train.run_name or cfg.name
        n = 2
        while holds_run(Path(cfg.train.out_dir) / f"{base}-{n}"):
            n += 1
        log.info("%s holds a run; this one is %s-%d", folder, base, n)
        return cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_name": f"{base}-{n}"})})
    if not holds_run(folder):
        return cfg
    if not resume:
        raise RunClaimError(f"{folder} already holds a run; pass --resume to continue it, --new to start a new run "
                            f"beside it ({folder.name}-2, …), or set train.run_name")
    saved = folder / "config.yaml"
    if saved.is_file():
        changes = config_changes(yaml.safe_load(saved.read_text(encoding="utf-8")) or {}, cfg.model_dump(mode="json"))
        if changes and not allow_config_change:
            listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items())
            raise RunClaimError(f"--resume of {folder} with a config that changes the run ({listed}); the LR schedule "
                                "and data order follow these fields. Resume with the saved config, or pass "
                                "--allow-config-change to accept (and record) the change")
        if changes:
            record_changes(folder, changes)
    return cfg


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Run-shaping fields whose value differs: dotted name -> (saved, new)."""
    before, after = _flat({k: old.get(k) for k in RUN_SHAPING}), _flat({k: new.get(k) for k in RUN_SHAPING})
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k) and k not in NOT_RUN_SHAPING}


def record_changes(folder: Path, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append the change (with the newest checkpoint's step) to `config-changes.jsonl` and log it."""
    step = _latest_step(folder)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "resumed_at_step": step,
             "changes": {k: {"saved": old, "new": new} for k, (old, new) in changes.items()}}
    with open(folder / CHANGES_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, default=str) + "\n")
    log.warning("resuming %s at step %s with a changed config: %s (recorded in %s)", folder, step,
                "; ".join(f"{k}: {o!r} -> {n!r}" for k, (o, n) in changes.items()), folder / CHANGES_FILE)


def _latest_step(folder: Path) -> int | None:
    steps = [int(p.name[len(PREFIX):]) for p in (folder / "checkpoints").glob(f"{PREFIX}*")
             if p.name[len(PREFIX):].isdigit()]
    return max(steps) if steps else None


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out
