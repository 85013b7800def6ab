"""What a training worker builds before its first step: model, optimizer, data, checkpoint, tracker run.

The order carries two of the loop's guarantees. Every rank seeds the same generator before it
builds the model (identical initialisation; the data differs by rank through the loader), and
rank 0 resolves the document inputs (`with_parquet_documents`) and broadcasts the config, so all
ranks prepare the same token shards. A resumed run takes model, optimizer, data position,
bad-step count and tracker run id from the latest checkpoint, which is what lets it reproduce the
uninterrupted run bitwise on CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from services.trainer.bias_window import BiasUpdates
from services.trainer.checkpoint import CheckpointManager
from services.trainer.data import eval_loader, prepare_shards, train_loader, with_parquet_documents
from services.trainer.health import RouterHealthMonitor
from services.trainer.metrics import MetricsFile, Throughput
from services.trainer.parallel import apply_block_options, global_param_sum, parallelize
from services.trainer.router_cooldown import RouterCooldown
from shared import tracking
from shared.checkpoint import load_trained_model
from shared.config import ExperimentConfig, save_resolved
from shared.hardware import measured_peak_flops
from shared.model import MoETransformer, ParamCounts, count_params, flops_per_token
from shared.optim import build_optimizer

log = logging.getLogger(__name__)


@dataclass
class WorkerContext:
    rank: int
    world_size: int
    device: torch.device


def run_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.train.out_dir) / (cfg.train.run_name or cfg.name)


@dataclass
class Worker:
    """One worker's training state, built by `set_up`; the loop advances `bad_total` and `last_good`."""

    cfg: ExperimentConfig
    ctx: WorkerContext
    out: Path
    model: torch.nn.Module
    counts: ParamCounts
    optimizer: Any
    autocast: Any
    loader: Any
    held_out: Any  # None without held-out documents
    ckpt: CheckpointManager
    run: Any  # the tracker run (a disabled one on ranks other than 0)
    start: int  # first step to run (0, or the resumed checkpoint's step)
    bad_total: int
    last_good: str | None  # the newest checkpoint written or resumed from
    peak_flops: float | None
    train_flops: float  # training FLOPs (forward + backward) per token
    tokens_per_step: int  # over every rank
    per_micro_batch: bool  # router biases move after every micro-batch, not after every step
    bias_updates: BiasUpdates  # moves the biases from each update's loads, or from a window of them
    router_cooldown: RouterCooldown  # scales the router's steps over the last steps (factor 1 when off)
    # the router and the routed experts are where small-batch MoE training breaks first: their own norms
    watched: dict[str, list[torch.nn.Parameter]]
    health: RouterHealthMonitor
    history: MetricsFile
    bar: tqdm
    speed: Throughput = field(default_factory=Throughput)

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint holds beside model and optimizer state: enough to resume bitwise."""
        window = self.bias_updates.state_dict()
        return {"data": self.loader.state_dict(), "tracker_run_id": self.run.id, "bad_steps": self.bad_total,
                "optim_step": self.optimizer.step_count, **({"bias_window": window} if window else {})}


def load_initial_weights(model: MoETransformer, path: str) -> Path:
    """Copy the weights of the checkpoint at `path` (`train.init_from`) into the freshly built `model`,
    bit for bit, router biases included; returns the checkpoint folder.

    Only the model is taken: optimizer moments, schedule position and data position start afresh,
    which is what continued pretraining from an imported or exported model needs (an import has no
    optimizer state). Done before parallelize, on every rank alike, so sharding slices these weights
    as it would the random init. The global RNG state is kept, so the data order and dropout of a run
    started this way follow `train.seed` as any other run's do."""
    rng = torch.get_rng_state()
    trained = load_trained_model(path)
    torch.set_rng_state(rng)
    model.load_state_dict(trained.model.state_dict())
    log.info("train.init_from: weights of %s (step %d)", trained.checkpoint, trained.step)
    return trained.checkpoint


def set_up(cfg: ExperimentConfig, ctx: WorkerContext, resume: bool) -> Worker:
    """Build rank `ctx.rank`'s model, optimizer, loaders and tracker run; restore the latest
    checkpoint when `resume` (a warning, and step 0, when there is none)."""
    tc = cfg.train
    out = run_dir(cfg)
    is_main = ctx.rank == 0
    if is_main:
        save_resolved(cfg, out)
    torch.manual_seed(tc.seed)  # identical init on every rank; data differs by rank through the loader
    torch.use_deterministic_algorithms(ctx.device.type == "cpu", warn_only=True)

    model = MoETransformer(cfg.model).to(ctx.device)
    if tc.init_from is not None:  # a resumed checkpoint, loaded below, replaces these weights again
        load_initial_weights(model, tc.init_from)
    counts = count_params(cfg.model)
    model = apply_block_options(model, tc)
    model = parallelize(model, tc, ctx.rank, ctx.world_size)
    autocast = torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=tc.dtype == "bfloat16")
    optimizer = build_optimizer(model, cfg.optim, tc.steps, master_weights=cfg.model.moe.precision.master_weights,
                                param_sum=global_param_sum(model))

    if is_main:
        cfg = with_parquet_documents(cfg)
    if dist.is_initialized():
        holder = [cfg.model_dump(mode="json")]
        dist.broadcast_object_list(holder, src=0)
        cfg = type(cfg).model_validate(holder[0])
    prepare_shards(cfg, ctx.rank)
    loader = train_loader(cfg, ctx.rank, ctx.world_size)
    held_out = eval_loader(cfg, ctx.rank, ctx.world_size)

    ckpt = CheckpointManager(out / "checkpoints", keep_last=tc.keep_last)
    start, run_id, bad_total = 0, None, 0
    bias_updates = BiasUpdates(model, cfg.model.moe.balance.bias_update_window_tokens)
    latest = ckpt.latest() if resume else None
    if resume and latest is None:
        log.warning("--resume: no checkpoint under %s, starting from step 0", ckpt.root)
    if latest is not None:
        meta = ckpt.load(latest, model, optimizer)
        optimizer.step_count = meta["optim_step"]
        loader.load_state_dict(meta["data"])
        start, run_id, bad_total = meta["step"], meta.get("tracker_run_id"), meta.get("bad_steps", 0)
        bias_updates.load_state_dict(meta.get("bias_window", {}))

    run = tracking.init(config=cfg, name=tc.run_name or cfg.name, tags=["train", cfg.model.ffn, *tc.tags], id=run_id,
                        mode=cfg.tracker.mode if is_main else "disabled")
    backends = getattr(model, "precision_backends", None) or {}
    if backends:  # which GEMM backend each precision mode runs on (auto: TE, native or emulation) and why
        run.event("precision", "; ".join(f"{k} {c['mode']} on {c['backend']} ({c['why']})" for k, c in backends.items()),
                  **{f"{k}_{f}": str(c[f]) for k, c in backends.items() for f in ("mode", "backend")})
    peak = measured_peak_flops(ctx.device, measure_missing=ctx.world_size == 1)
    train_flops = flops_per_token(cfg.model, tc.seq_len, counts)
    health = RouterHealthMonitor(tc.router_health, cfg.model.moe.n_routed_experts)
    tokens_per_step = tc.micro_batch_size * tc.seq_len * tc.grad_accum * ctx.world_size
    speed = Throughput()
    per_micro_batch = cfg.model.moe.balance.bias_update_every == "micro_batch"
    watched = {part: [p for n, p in model.named_parameters() if key in n]
               for part, key in (("router", ".router."), ("experts", ".experts."))}
    watched = {k: v for k, v in watched.items() if v}
    bar = tqdm(total=tc.steps, initial=start, desc="train", disable=not is_main, dynamic_ncols=True)
    history = MetricsFile(out / "metrics.jsonl", enabled=is_main)
    return Worker(cfg=cfg, ctx=ctx, out=out, model=model, counts=counts, optimizer=optimizer, autocast=autocast,
                  loader=loader, held_out=held_out, ckpt=ckpt, run=run, start=start, bad_total=bad_total,
                  last_good=str(latest) if latest else None, peak_flops=peak, train_flops=train_flops,
                  tokens_per_step=tokens_per_step, per_micro_batch=per_micro_batch, bias_updates=bias_updates,
                  router_cooldown=RouterCooldown(model, cfg.model.moe.balance.router_lr_cooldown, tc.steps),
                  watched=watched, health=health,
                  history=history, bar=bar, speed=speed)
