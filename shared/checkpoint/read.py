"""Load a trained moelab checkpoint into one process, whatever layout wrote it.

Why here and not in the trainer: evaluation, export, generation and router calibration all need
"the model at this checkpoint" without Ray, an optimizer or a process group, and `shared/` may not
import `services/`. The trainer saves each model tensor whole (expert-parallel slices are written
as pieces of their global (E, …) tensor, see services/trainer/ep_state.py), so a single process
reads every `model.*` entry of the DCP checkpoint into a freshly built model; nothing of the
optimizer is read.

A checkpoint folder is `<run>/checkpoints/step_<8 digits>/` with the DCP files and `meta.json`; the
run's resolved config is `<run>/config.yaml`. Every way this can be wrong (no checkpoint, an
unfinished `.tmp` save, a truncated or corrupt file, a checkpoint of another model shape, a missing
config or tokenizer) is a `CheckpointError` that names the file and says what to do.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed.checkpoint as dcp
import yaml
from torch.distributed.checkpoint.api import CheckpointException

from shared.config import ConfigError, ExperimentConfig
from shared.config.loader import validate
from shared.data.tokenizer import MoeTokenizer, TokenizerError, load_tokenizer
from shared.model import MoETransformer

STEP_PREFIX = "step_"
META_FILE = "meta.json"
CONFIG_FILE = "config.yaml"
MODEL_PREFIX = "model."
BiasChoice = Literal["average", "live"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and what to do."""


@dataclass
class TrainedModel:
    """A trained model in eval mode, fp32, with where it came from.

    `bias` says which router bias eval-mode routing selects with ("average" or "live"); `tokenizer`
    is None when the run's tokenizer folder is missing (`tokenizer_error` says why), see
    `require_tokenizer`."""

    model: MoETransformer
    cfg: ExperimentConfig
    checkpoint: Path
    meta: dict[str, Any]
    tokenizer: MoeTokenizer | None
    bias: str = "average"
    tokenizer_error: str | None = None

    @property
    def run_dir(self) -> Path:
        return self.checkpoint.parent.parent

    @property
    def step(self) -> int:
        return int(self.meta.get("step", -1))

    def require_tokenizer(self) -> MoeTokenizer:
        """The tokenizer, or a CheckpointError naming the folder that should have held it."""
        if self.tokenizer is None:
            raise CheckpointError(self.tokenizer_error or f"no tokenizer for {self.checkpoint}")
        return self.tokenizer


def _is_complete(step_dir: Path) -> bool:
    return (step_dir.is_dir() and step_dir.name.startswith(STEP_PREFIX) and not step_dir.name.endswith(".tmp")
            and (step_dir / META_FILE).is_file())


def _step_number(step_dir: Path) -> int:
    try:
        return int(step_dir.name[len(STEP_PREFIX):])
    except ValueError:
        return -1


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint folder `path` names: a `step_*` folder itself, or a run folder's newest complete one.

    Unfinished saves (`step_*.tmp`, or a folder without `meta.json`) are never picked: they are what
    a run killed mid-save leaves behind."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: no such file or folder; give a run folder (runs/<name>) or one of its "
                              "checkpoints/step_* folders")
    if p.name.startswith(STEP_PREFIX):
        if p.name.endswith(".tmp"):
            raise CheckpointError(f"{p}: an unfinished save (a run stopped while writing it); use a complete "
                                  f"step_* folder beside it")
        if not (p / META_FILE).is_file():
            raise CheckpointError(f"{p / META_FILE}: missing, so {p} is not a complete checkpoint (a run stopped "
                                  "while writing it?); use a complete step_* folder beside it")
        return p
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    done = sorted((d for d in root.iterdir() if _is_complete(d)), key=_step_number) if root.is_dir() else []
    if not done:
        raise CheckpointError(f"{p}: no complete checkpoint (a checkpoints/step_* folder with {META_FILE}) under "
                              f"{root}; train the run further or give a step_* folder")
    return done[-1]


def _read_config(run: Path) -> ExperimentConfig:
    path = run / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; a checkpoint is read with its run's resolved config, which the "
                              "trainer writes beside checkpoints/ (copy it back from the run that wrote it)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return validate(raw, source=str(path))
    except (yaml.YAMLError, ConfigError) as exc:
        raise CheckpointError(f"{path}: not a valid moelab config: {exc}") from None


def tokenizer_folder(cfg: ExperimentConfig, run: Path) -> list[Path]:
    """Where the run's tokenizer may be: the configured file/folder as given (relative to the working
    folder the run was started from) or relative to each folder above the run."""
    tc = cfg.mixture.tokenizer
    given = Path(tc.path or tc.out_dir)
    if given.is_absolute():
        return [given]
    return [Path.cwd() / given, *(parent / given for parent in run.resolve().parents)]


def _load_tokenizer(cfg: ExperimentConfig, run: Path) -> tuple[MoeTokenizer | None, str | None]:
    candidates = tokenizer_folder(cfg, run)
    for folder in candidates:
        if folder.exists():
            try:
                return load_tokenizer(folder), None
            except TokenizerError as exc:
                return None, f"{folder}: the run's tokenizer does not load: {exc}"
    return None, (f"{candidates[0]}: the tokenizer of run {run} is missing (mixture.tokenizer in {run / CONFIG_FILE}); "
                  "restore that folder or run from the folder the run was started in")


def _check_entries(ckpt: Path, stored: dict[str, Any], wanted: dict[str, torch.Tensor]) -> list[str]:
    """Compare the checkpoint's model entries with the model's; returns the bias averages it lacks."""
    missing, mismatched, unsaved_avg = [], [], []
    for key, tensor in wanted.items():
        meta = stored.get(MODEL_PREFIX + key)
        if meta is None:
            (unsaved_avg if key.endswith("expert_bias_avg_E") else missing).append(key)
        elif tuple(getattr(meta, "size", ())) != tuple(tensor.shape):
            mismatched.append(f"{key}: checkpoint {tuple(meta.size)} vs config {tuple(tensor.shape)}")
    extra = sorted(k[len(MODEL_PREFIX):] for k in stored if k.startswith(MODEL_PREFIX) and k[len(MODEL_PREFIX):] not in wanted)
    if missing or mismatched or extra:
        parts = [f"{len(mismatched)} shape mismatches ({'; '.join(mismatched[:4])})" if mismatched else "",
                 f"{len(missing)} tensors missing ({', '.join(missing[:4])})" if missing else "",
                 f"{len(extra)} unexpected tensors ({', '.join(extra[:4])})" if extra else ""]
        raise CheckpointError(f"{ckpt}: written by another model config than {ckpt.parent.parent / CONFIG_FILE}: "
                              + "; ".join(p for p in parts if p) + ". Load it with the config of the run that wrote it")
    return unsaved_avg


def _read_metadata(ckpt: Path) -> dict[str, Any]:
    meta_file = ckpt / ".metadata"
    if not meta_file.is_file():
        raise CheckpointError(f"{meta_file}: missing, so {ckpt} holds no DCP checkpoint; use another step_* folder")
    try:
        return dcp.FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata
    except (Exception, CheckpointException) as exc:  # a truncated or overwritten pickle fails in many ways
        raise CheckpointError(f"{meta_file}: unreadable ({type(exc).__name__}: {exc}); the checkpoint is corrupt, "
                              "use another step_* folder") from None


def _load_tensors(ckpt: Path, state: dict[str, torch.Tensor]) -> None:
    try:
        with warnings.catch_warnings():  # a single process is the intended case here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load({"model": state}, checkpoint_id=str(ckpt))
    except (Exception, CheckpointException) as exc:  # DCP wraps a rank's failure in a BaseException
        files = ", ".join(sorted(p.name for p in ckpt.glob("*.distcp"))) or "no .distcp files"
        cause = [line for line in str(exc).splitlines() if line.strip()][-1:] or [type(exc).__name__]
        raise CheckpointError(f"{ckpt}: its tensor files ({files}) do not read back ({cause[0].strip()[:300]}); "
                              "the checkpoint is truncated or corrupt, use another step_* folder") from None


def inspect_checkpoint(path: str | os.PathLike) -> tuple[Path, ExperimentConfig]:
    """The checkpoint folder `path` names and its run's config, with its DCP index read but no tensor.

    What a config check can afford to verify before any work: that a checkpoint is there, complete,
    indexed, and which model config wrote it. A `CheckpointError` names the file otherwise."""
    ckpt = resolve_checkpoint(path)
    cfg = _read_config(ckpt.parent.parent)
    _read_metadata(ckpt)
    return ckpt, cfg


@torch.no_grad()
def route_with_live_bias(model: MoETransformer) -> None:
    """Copy every router's live bias into the average's slot, which eval mode selects with here."""
    for layer in model.moe_layers():
        layer.router.expert_bias_avg_E.copy_(layer.router.expert_bias_E)


def load_trained_model(path: str | os.PathLike, *, bias: BiasChoice = "average", device: str = "cpu",
                       require_tokenizer: bool = False) -> TrainedModel:
    """The model saved at `path` (a run folder or a `step_*` folder), fp32, in eval mode, on `device`.

    `bias` picks the router bias eval mode selects experts with: "average", the moving average the
    trainer keeps for frozen-model routing, or "live", the bias as last updated (copied into the
    average's slot, so `model.eval()` routes with it). With `require_tokenizer` a missing tokenizer
    is an error instead of `tokenizer=None`."""
    if bias not in ("average", "live"):
        raise ValueError(f"bias must be 'average' or 'live', got {bias!r}")
    ckpt = resolve_checkpoint(path)
    run = ckpt.parent.parent
    cfg = _read_config(run)
    try:
        meta = json.loads((ckpt / META_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{ckpt / META_FILE}: unreadable ({exc}); the checkpoint is corrupt") from None
    stored = _read_metadata(ckpt)
    # the router reads which bias eval mode selects with from its config: always the average slot here,
    # which holds the bias asked for
    model_cfg = cfg.model.model_copy(deep=True)
    model_cfg.moe.balance.eval_bias = "average"
    torch.manual_seed(0)  # every weight is overwritten; a fixed seed keeps the build itself reproducible
    model = MoETransformer(model_cfg).float()
    state = model.state_dict()
    unsaved = _check_entries(ckpt, stored, state)
    for key in unsaved:
        del state[key]
    _load_tensors(ckpt, state)
    for key in unsaved:  # a checkpoint from before the router kept an average: the average is the bias
        state[key] = state[key.replace("expert_bias_avg_E", "expert_bias_E")].clone()
    model.load_state_dict(state)
    if bias == "live":
        route_with_live_bias(model)
    model.to(device).eval()
    tokenizer, why = _load_tokenizer(cfg, run)
    loaded = TrainedModel(model=model, cfg=cfg, checkpoint=ckpt, meta=meta, tokenizer=tokenizer, bias=bias,
                          tokenizer_error=why)
    if require_tokenizer:
        loaded.require_tokenizer()
    return loaded
