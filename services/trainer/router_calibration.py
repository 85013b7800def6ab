"""A trained checkpoint's frozen router, measured and calibrated: `moelab router frozen|calibrate`.

The measure routes tokens the checkpoint has not trained on: the training stream from where the
checkpoint's loader stopped (the mixture the bias was balanced on) and the held-out documents.
Calibration re-solves the eval-time bias (`shared.model.router_frozen.calibrate_biases`) on the
next `tokens` tokens of the training stream and judges it on the `eval_tokens` that follow them,
which it never saw. The new checkpoint is written by the trainer's `CheckpointManager` with the
model and optimizer exactly as loaded except the eval-time bias, and its meta records the
calibration (data, tokens, figures before and after), in a run folder of its own (the run's
config.yaml beside `checkpoints/`), so it loads and resumes like any other.

Why 131,072 calibration tokens by default: the solver balances its sample exactly, so what the
model shows on unseen tokens is that sample's fluctuation. On the tiny recipe (seed 0) 65,536
calibration tokens left the frozen MaxVio at 3.0× its floor, 131,072 at 1.8×; fewer than 65,536
are refused.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import torch

from services.trainer.checkpoint import CheckpointManager
from services.trainer.data import eval_config, with_parquet_documents
from shared.config import ExperimentConfig, load_config
from shared.config.model import BalanceConfig
from shared.data.prepare import make_loader
from shared.model import MoETransformer
from shared.model.router_frozen import Sequences, calibrate_biases, frozen_stats, record_routing
from shared.optim import build_optimizer

log = logging.getLogger(__name__)

DEFAULT_TOKENS = BalanceConfig.model_fields["calibration_tokens"].default  # what a run calibrates on at its end
EVAL_TOKENS = 131072  # tokens the frozen figures are judged on, as `moelab router frozen` routes by default
MIN_TOKENS = 65536


def resolve(path: str | Path) -> tuple[Path, Path]:
    """(run folder, checkpoint folder) for a run folder (its newest checkpoint) or a checkpoint folder."""
    path = Path(path)
    if (path / "meta.json").is_file():
        run = path.parent.parent
    elif (path / "checkpoints").is_dir():
        run, latest = path, CheckpointManager(path / "checkpoints").latest()
        if latest is None:
            raise FileNotFoundError(f"{path}: no complete checkpoint under {path / 'checkpoints'}")
        path = latest
    else:
        raise FileNotFoundError(f"{path}: neither a checkpoint folder (with meta.json) nor a run folder (with checkpoints/)")
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"{run / 'config.yaml'}: the run's resolved config is missing; it names the data and model")
    return run, path


def load_checkpoint(path: str | Path) -> tuple[ExperimentConfig, torch.nn.Module, Any, dict, Path]:
    """Config, model, optimizer (as the trainer builds them, in one process) and meta of a checkpoint."""
    run, ckpt = resolve(path)
    cfg = load_config(run / "config.yaml")
    torch.manual_seed(cfg.train.seed)
    model = MoETransformer(cfg.model)
    optimizer = build_optimizer(model, cfg.optim, cfg.train.steps, master_weights=cfg.model.moe.precision.master_weights)
    meta = CheckpointManager(ckpt.parent).load(ckpt, model, optimizer)
    optimizer.step_count = meta.get("optim_step", 0)
    return cfg, model, optimizer, meta, run


def _take(loader, n_tokens: int, seq_len: int) -> Sequences | None:
    """The next `n_tokens` of `loader` as whole sequences; fewer when its stream ends first (a mixture
    with `on_exhausted: stop`), None when it yields none."""
    rows, targets, sources = [], [], []
    for _ in range(math.ceil(n_tokens / seq_len)):
        try:
            batch = next(loader)
        except StopIteration:
            break
        for b in range(batch.inputs_BT.shape[0]):
            rows.append(batch.inputs_BT[b])
            targets.append(batch.targets_BT[b])
            sources.append(batch.sources_B[b])
    n = math.ceil(n_tokens / seq_len)
    if not rows:
        return None
    return Sequences(torch.stack(rows[:n]), torch.stack(targets[:n]), tuple(sources[:n]))


def training_stream(cfg: ExperimentConfig, position: dict, n_tokens: int, skip_tokens: int = 0) -> Sequences:
    """`n_tokens` of the training mixture's stream after `position` (a loader state) and `skip_tokens`."""
    loader = make_loader(cfg)
    loader.load_state_dict(position)
    if skip_tokens:
        _take(loader, skip_tokens, cfg.train.seq_len)
    return _take(loader, n_tokens, cfg.train.seq_len)


def held_out_stream(cfg: ExperimentConfig, n_tokens: int) -> Sequences | None:
    """The first `n_tokens` of the held-out documents, at most one pass over them: a split smaller
    than `n_tokens` gives the sequences its sources hold. Repeating it would count the same
    documents twice, and the floor's bootstrap, which resamples documents as independent, would
    read too low. The stream is capped rather than opened with `on_exhausted: stop`, which refuses
    a split with any source shorter than one sequence (the demo's held-out split has one). None
    without held-out documents."""
    held = eval_config(cfg)
    if held is None:
        return None
    loader = make_loader(held)
    one_pass = sum(loader.mixture.capacities) * cfg.train.seq_len
    return _take(loader, min(n_tokens, one_pass), cfg.train.seq_len)


def eos_id(cfg: ExperimentConfig) -> int:
    return make_loader(cfg).mixture.eos_id


def calibration_skip(meta: dict) -> int:
    """Training-stream tokens to skip after a checkpoint's loader position before judging its frozen
    router: those its eval-time bias was calibrated on (`router_calibration`, written by
    `calibrate_at_end` or `calibrate_checkpoint`) when they start at that very position, else 0.
    Routing them would judge the bias on its own fitting sample, which it balances by construction."""
    data = (meta.get("router_calibration") or {}).get("data") or {}
    position = meta.get("data")
    if position is None or data.get("stream") != "train" or data.get("after_loader_state") != position:
        return 0
    return int(data.get("tokens") or 0)


def frozen_report(model, cfg: ExperimentConfig, position: dict, tokens: int, skip_tokens: int = 0,
                  held_out: bool = True) -> dict[str, dict]:
    """`frozen_stats` on the training stream after `position` (+ `skip_tokens`) and on the held-out set;
    the held-out set's also at the training stream's source mix, which tells a held-out split that
    is unbalanced because its sources come in other shares from one whose sources route otherwise."""
    eos = eos_id(cfg)
    out = {"train": frozen_stats(model, record_routing(model, training_stream(cfg, position, tokens, skip_tokens), eos))}
    held = held_out_stream(cfg, tokens) if held_out else None
    if held is not None:
        out["held_out"] = frozen_stats(model, record_routing(model, held, eos), reference_mix=out["train"]["source_mix"])
    return out


def calibrate_checkpoint(path: str | Path, tokens: int = DEFAULT_TOKENS, eval_tokens: int = EVAL_TOKENS,
                         out: str | Path | None = None, held_out: bool = True, min_tokens: int = MIN_TOKENS,
                         eval_after: int | None = None) -> dict:
    """Calibrate a checkpoint's eval-time bias on `tokens` training-stream tokens after its position and
    write the new checkpoint as the run folder `out` (default `<run>/calibrated`: its config.yaml and
    checkpoints/); returns the record, with the frozen figures before and after on the `eval_tokens`
    that follow the first `eval_after` tokens (default: the calibration tokens; a larger value lets
    calibrations on different sample sizes be judged on the same tokens)."""
    if tokens < min_tokens:
        raise ValueError(f"--tokens {tokens}: below {min_tokens} the calibrated bias fits the sample, not the mixture")
    eval_after = tokens if eval_after is None else eval_after
    if eval_after < tokens:
        raise ValueError(f"eval_after {eval_after} < tokens {tokens}: the judged tokens would include calibration tokens")
    cfg, model, optimizer, meta, run = load_checkpoint(path)
    cfg = with_parquet_documents(cfg)
    if cfg.model.moe.balance.eval_bias != "average":
        raise ValueError(f"{run / 'config.yaml'}: model.moe.balance.eval_bias is {cfg.model.moe.balance.eval_bias!r}; the "
                         "calibrated bias is the eval-time bias, which only eval_bias=average routes with")
    position = meta["data"]
    before = frozen_report(model, cfg, position, eval_tokens, skip_tokens=eval_after, held_out=held_out)
    layers = calibrate_biases(model, training_stream(cfg, position, tokens), eos_id(cfg))
    after = frozen_report(model, cfg, position, eval_tokens, skip_tokens=eval_after, held_out=held_out)
    record = {"data": {"stream": "train", "after_loader_state": position, "tokens": tokens,
                       "sources": sorted(cfg.mixture.rates) or None},
              "eval_tokens": eval_tokens, "eval_after": eval_after, "layers": layers, "before": before, "after": after}
    saved_meta = {k: v for k, v in meta.items() if k != "step"} | {"router_calibration": record}
    out = Path(out) if out else run / "calibrated"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / "config.yaml", out / "config.yaml")  # a run folder of its own: readable like any run
    saved = CheckpointManager(out / "checkpoints", keep_last=10**6).save(meta["step"], model, optimizer, saved_meta)
    log.info("calibrated checkpoint written to %s", saved)
    return {"checkpoint": str(saved), **record}


def summary_line(name: str, stats: dict) -> str:
    per_layer = " / ".join(f"{v:.3f}" for v in stats["maxvio"].values())
    return (f"{name}: frozen MaxVio {stats['maxvio_worst']:.3f} (layers {per_layer}), floor {stats['floor_worst']:.3f} "
            f"({stats['ratio_to_floor']:.2f}x), no bias {stats['maxvio_no_bias_worst']:.3f}, "
            f"bias sensitivity {json.dumps({k: round(v, 3) for k, v in stats['bias_sensitivity'].items()})} per +0.01, "
            f"{stats['tokens']:,} tokens in {stats['documents']:,} documents{_at_mix(stats)}")


def _at_mix(stats: dict) -> str:
    if "maxvio_at_reference_mix_worst" not in stats:
        return ""
    missing = stats["reference_mix_missing"]
    return (f"; at the training stream's source mix {stats['maxvio_at_reference_mix_worst']:.3f}"
            + (f" (without {', '.join(missing)}, absent there)" if missing else ""))


def _sum_over_ranks(device: torch.device):
    """Loads summed over every data-parallel rank (identity in one process)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None

    def reduce(load_E: torch.Tensor) -> torch.Tensor:
        summed = load_E.to(device)
        dist.all_reduce(summed)
        return summed.cpu()

    return reduce


def calibrate_at_end(w) -> dict[str, float]:
    """The trainer's end-of-run calibration (`model.moe.balance.calibrate_at_end`): re-solve the eval-time
    bias on the next `calibration_tokens` of the training stream (each rank its own share, loads summed
    over ranks) and save the final checkpoint again with the calibration in its meta. Returns the
    calibration set's MaxVio before/after per layer as tracker scalars."""
    from services.trainer.data import train_loader

    cfg, ctx = w.cfg, w.ctx
    tokens = cfg.model.moe.balance.calibration_tokens
    position = w.loader.state_dict()
    loader = train_loader(cfg, ctx.rank, ctx.world_size)
    loader.load_state_dict(position)
    seqs = _take(loader, math.ceil(tokens / ctx.world_size), cfg.train.seq_len)
    layers = calibrate_biases(w.model, seqs, loader.mixture.eos_id, _sum_over_ranks(ctx.device))
    record = {"data": {"stream": "train", "after_loader_state": position, "tokens": tokens}, "layers": layers}
    path = w.ckpt.save(cfg.train.steps, w.model, w.optimizer, w.checkpoint_meta() | {"router_calibration": record})
    w.last_good = str(path)
    metrics = {}
    for layer, figures in layers.items():
        metrics[f"router_calibration/maxvio_before/{layer}"] = figures["maxvio_before"]
        metrics[f"router_calibration/maxvio_after/{layer}"] = figures["maxvio_after"]
    return metrics
