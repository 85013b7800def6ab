"""Checkpoints with torch.distributed.checkpoint (DCP), written so a kill never corrupts one.

Layout: `<run>/checkpoints/step_00000100/` holds the DCP shards of model + optimizer (+ the
router bias buffers, which are part of the model's state), `rank<r>.pt` per-rank extras (RNG
states) and `meta.json` (step, data-loader position, scheduler, tracker run id, counters). A save
goes to `step_<8-digit step>.tmp` and is renamed only after every rank finished and `meta.json` is
written; a directory without that final name is never read, so a kill -9 during a save leaves the
previous checkpoint as the latest loadable one. The newest `keep_last` checkpoints are kept.

Expert-parallel shards are saved as what they are, slices of global (E, …) tensors
(ep_state.py), so a checkpoint is not tied to the layout that wrote it: EP=2 resumes at EP=1, in
one process, or at EP=2 again.

A checkpoint that lacks part of what this code restores still loads, but never quietly: router
bias averages it does not hold start from the live bias, and a rank without its RNG file keeps its
current RNG (the resumed run then draws differently from an uninterrupted one). Each such gap is
logged as a warning and listed in the returned meta under `load_gaps`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from services.trainer.ep_state import as_global, as_local, expert_layout

log = logging.getLogger(__name__)

PREFIX = "step_"
Optimizers = torch.optim.Optimizer | list[torch.optim.Optimizer] | Any


def _torch_optimizers(optimizer: Optimizers) -> torch.optim.Optimizer | list[torch.optim.Optimizer]:
    """A torch optimizer, a list of them, or an object holding them in `.optimizers` (MultiOptimizer)."""
    held = getattr(optimizer, "optimizers", None)
    return list(held.values()) if isinstance(held, dict) else optimizer


def _dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _dist_on() else 0


def _barrier() -> None:
    if _dist_on():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _bias_averages_not_saved(path: Path, model_sd: dict[str, Any]) -> list[str]:
    """Router bias averages that a checkpoint written before the router kept one does not hold; such a
    checkpoint resumes with each average set to its live bias instead of failing to load."""
    stored = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    return [k for k in model_sd if k.endswith("expert_bias_avg_E") and f"model.{k}" not in stored]


class CheckpointManager:
    def __init__(self, root: str | os.PathLike, keep_last: int = 2):
        self.root = Path(root)
        self.keep_last = keep_last

    def path_for(self, step: int) -> Path:
        return self.root / f"{PREFIX}{step:08d}"

    def list(self) -> list[Path]:
        """Complete checkpoints, oldest first (unfinished `.tmp` saves are never listed)."""
        if not self.root.is_dir():
            return []
        done = [p for p in self.root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)
                and not p.name.endswith(".tmp") and (p / "meta.json").is_file()]
        return sorted(done, key=lambda p: int(p.name[len(PREFIX):]))

    def latest(self) -> Path | None:
        found = self.list()
        return found[-1] if found else None

    def save(self, step: int, model: torch.nn.Module, optimizer: Optimizers, meta: dict[str, Any]) -> Path:
        """Save model + optimizer(s) (sharded by DCP) and `meta`; atomic across ranks."""
        final = self.path_for(step)
        tmp = final.with_name(final.name + ".tmp")
        if _rank() == 0:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
        _barrier()
        model_sd, optim_sd = get_state_dict(model, _torch_optimizers(optimizer))
        as_global(model_sd, optim_sd, expert_layout(model))
        with warnings.catch_warnings():  # single-process runs are a supported case, not a warning
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
        torch.save(rng_state(), tmp / f"rank{_rank()}.pt")
        _barrier()
        if _rank() == 0:
            meta_tmp = tmp / "meta.json.tmp"
            meta_tmp.write_text(json.dumps({"step": step, **meta}, indent=2))
            os.replace(meta_tmp, tmp / "meta.json")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            self._prune()
        _barrier()
        return final

    def load(self, path: Path, model: torch.nn.Module, optimizer: Optimizers) -> dict[str, Any]:
        """Restore model, optimizer(s) and this rank's RNG from `path`; returns its meta, with
        `load_gaps` listing what the checkpoint lacked and how the load filled it in."""
        optimizer = _torch_optimizers(optimizer)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        layout = expert_layout(model)
        as_global(model_sd, optim_sd, layout)
        unsaved = _bias_averages_not_saved(path, model_sd)
        for key in unsaved:
            del model_sd[key]
        state = {"model": model_sd, "optim": optim_sd}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=str(path))
        for key in unsaved:  # the average starts from the bias it would have averaged
            model_sd[key] = model_sd[key.replace("expert_bias_avg_E", "expert_bias_E")].clone()
        as_local(state["model"], state["optim"], layout)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        gaps = []
        if unsaved:
            gaps.append(f"{len(unsaved)} router bias average(s) not in the checkpoint, started from the live bias")
        rng_file = path / f"rank{_rank()}.pt"
        if rng_file.exists():
            set_rng_state(torch.load(rng_file, weights_only=False))
        else:
            gaps.append(f"no RNG state {rng_file.name}: rank {_rank()} keeps its current RNG, so the resumed run "
                        "draws differently from an uninterrupted one")
        for gap in gaps:
            log.warning("checkpoint %s: %s", path, gap)
        meta = json.loads((path / "meta.json").read_text())
        meta["load_gaps"] = gaps
        return meta

    def _prune(self) -> None:
        for old in self.list()[: -self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.root.glob(f"{PREFIX}*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
