"""The training loop every launch path runs: one function per worker process.

Per step: `grad_accum` micro-batches forward/backward (LM loss + the MoE aux losses), a finite
check agreed by all ranks (a NaN/Inf step is skipped and counted; `max_bad_steps` in a row stop
the run naming the last good checkpoint), the optimizer step (Muon + AdamW, schedule, muP; the
gradient norm and clipping global over every shard), the aux-loss-free router-bias update from
loads summed over all ranks, metrics and router health from the global batch (router_stats.py).
Rank 0 also appends every logged metric to `<run>/metrics.jsonl`, a local record that needs no
tracker.
Checkpoints hold model, optimizer, router biases, RNG, data position and the tracker run id, so
a resumed run reproduces the uninterrupted one bitwise on CPU.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from services.trainer.checkpoint import CheckpointManager
from services.trainer.data import eval_loader, prepare_shards, train_loader, with_parquet_documents
from services.trainer.health import RouterHealthMonitor
from services.trainer.metrics import MetricsFile, Throughput, memory_gib, mfu
from services.trainer.parallel import (
    apply_block_options,
    finish_gradients,
    global_param_sum,
    parallelize,
    sync_delayed_amaxes,
    sync_router_loads,
)
from services.trainer.router_stats import RouterTally, health_inputs, router_metrics
from shared import tracking
from shared.config import ExperimentConfig, save_resolved
from shared.hardware import measured_peak_flops
from shared.model import MoETransformer, count_params, flops_per_token
from shared.optim import build_optimizer

log = logging.getLogger(__name__)


@dataclass
class WorkerContext:
    rank: int
    world_size: int
    device: torch.device


class TrainingStopped(RuntimeError):
    """The run cannot continue (too many bad steps, a collapsed router with stop_on_collapse)."""


def run_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.train.out_dir) / (cfg.train.run_name or cfg.name)


def _all_ranks_max(value: float, device: torch.device) -> float:
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _mean_over_ranks(value: float, device: torch.device) -> float:
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def _grads_finite(model: torch.nn.Module) -> bool:
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            if not torch.isfinite(g).all():
                return False
    return True


def lm_loss(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits_BTV.float().reshape(-1, logits_BTV.shape[-1]), targets_BT.reshape(-1))


@torch.no_grad()
def evaluate(model, loader, batches: int, device: torch.device) -> dict[str, float]:
    """Mean LM loss over the first `batches` held-out batches (the same ones every time), and
    MaxVio_global: MaxVio of each MoE layer's loads summed over all of them and every rank."""
    loader.load_state_dict({"step": 0})
    model.eval()
    losses = []
    tally = RouterTally()
    for _ in range(batches):
        batch = next(loader)
        _, aux = model(batch.inputs_BT.to(device), batch.targets_BT.to(device))
        losses.append(float(aux["lm_loss"]))
        tally.add(aux["layers"])
    model.train()
    tally.reduce()
    out = {"eval/loss": _mean_over_ranks(sum(losses) / len(losses), device)}
    stats = tally.layer_stats()
    if stats:
        out["eval/maxvio_global"] = max(s["maxvio"] for s in stats.values())
        out.update({f"eval/maxvio_global/layer{i}": s["maxvio"] for i, s in stats.items()})
    return out


def train_worker(cfg: ExperimentConfig, ctx: WorkerContext, resume: bool = False) -> dict[str, Any]:
    """Train `cfg` as rank `ctx.rank` of `ctx.world_size`; returns final metrics (rank 0's view)."""
    tc = cfg.train
    out = run_dir(cfg)
    is_main = ctx.rank == 0
    if is_main:
        save_resolved(cfg, out)
    torch.manual_seed(tc.seed)  # identical init on every rank; data differs by rank through the loader
    torch.use_deterministic_algorithms(ctx.device.type == "cpu", warn_only=True)

    model = MoETransformer(cfg.model).to(ctx.device)
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
    latest = ckpt.latest() if resume else None
    if resume and latest is None:
        log.warning("--resume: no checkpoint under %s, starting from step 0", ckpt.root)
    if latest is not None:
        meta = ckpt.load(latest, model, optimizer)
        optimizer.step_count = meta["optim_step"]
        loader.load_state_dict(meta["data"])
        start, run_id, bad_total = meta["step"], meta.get("tracker_run_id"), meta.get("bad_steps", 0)

    run = tracking.init(config=cfg, name=tc.run_name or cfg.name, tags=["train", cfg.model.ffn], id=run_id,
                        mode=cfg.tracker.mode if is_main else "disabled")
    backends = getattr(model, "precision_backends", None) or {}
    if backends:  # which GEMM backend each precision mode runs on (auto: TE, native or emulation) and why
        run.event("precision", "; ".join(f"{k} {c['mode']} on {c['backend']} ({c['why']})" for k, c in backends.items()),
                  **{f"{k}_{f}": str(c[f]) for k, c in backends.items() for f in ("mode", "backend")})
    peak = measured_peak_flops(ctx.device, measure_missing=ctx.world_size == 1)
    train_flops = flops_per_token(cfg.model, tc.seq_len, counts)  # training FLOPs (fwd + bwd) per token
    n_experts = cfg.model.moe.n_routed_experts
    health = RouterHealthMonitor(tc.router_health, n_experts)
    tokens_per_step = tc.micro_batch_size * tc.seq_len * tc.grad_accum * ctx.world_size
    speed = Throughput()
    per_micro_batch = cfg.model.moe.balance.bias_update_every == "micro_batch"
    # the router and the routed experts are where small-batch MoE training breaks first: their own norms
    watched = {part: [p for n, p in model.named_parameters() if key in n]
               for part, key in (("router", ".router."), ("experts", ".experts."))}
    watched = {k: v for k, v in watched.items() if v}
    bar = tqdm(total=tc.steps, initial=start, desc="train", disable=not is_main, dynamic_ncols=True)
    history = MetricsFile(out / "metrics.jsonl", enabled=is_main)
    last_good = str(latest) if latest else None
    bad_run, final = 0, {}

    for step in range(start, tc.steps):
        speed.start()
        loss_sum, aux_sum, tally = 0.0, 0.0, RouterTally()
        for _ in range(tc.grad_accum):
            batch = next(loader)
            with autocast:
                _, aux = model(batch.inputs_BT.to(ctx.device), batch.targets_BT.to(ctx.device))
            loss = aux["lm_loss"]
            if step in tc.fault_inject_nan_steps:
                loss = loss * float("nan")
            ((loss + aux["aux_loss"]) / tc.grad_accum).backward()
            if per_micro_batch:  # after the backward: a recomputed forward must route as the first did
                sync_router_loads(model)
                model.update_router_biases()
            loss_sum += float(loss.detach()) / tc.grad_accum
            aux_sum += float(aux["aux_loss"].detach()) / tc.grad_accum
            tally.add(aux["layers"])
        bad = not (math.isfinite(loss_sum) and _grads_finite(model))
        if _all_ranks_max(float(bad), ctx.device) > 0:
            optimizer.zero_grad()
            for layer in model.moe_layers():
                layer.load_accum_E.zero_()
            bad_run, bad_total = bad_run + 1, bad_total + 1
            run.event("bad_step", f"step {step}: non-finite loss or gradients, step skipped", step=step)
            log.warning("step %d: non-finite loss or gradients; skipped (%d in a row)", step, bad_run)
            if bad_run >= tc.max_bad_steps:
                run.finish(status="failed")
                raise TrainingStopped(
                    f"{bad_run} consecutive non-finite steps (max_bad_steps={tc.max_bad_steps}) at step {step}; "
                    f"last good checkpoint: {last_good or 'none'}"
                )
            speed.stop(0)
            bar.update(1)
            continue
        bad_run = 0
        finish_gradients(model, tc, ctx.world_size)
        sync_delayed_amaxes(model)
        part_norms = {f"grad_norm/{part}": float(optimizer.grad_norm(ps)) for part, ps in watched.items()
                      if all(p.grad is not None for p in ps)}  # before the step: clipping rescales grads
        opt_stats = {**optimizer.step(), **part_norms}
        optimizer.zero_grad()
        if not per_micro_batch:
            sync_router_loads(model)
            model.update_router_biases()
        speed.stop(tokens_per_step)

        loss_mean = _mean_over_ranks(loss_sum, ctx.device)
        tally.reduce()
        stats = tally.layer_stats()
        if step % tc.log_every == 0 or step == tc.steps - 1:
            tps = speed.rate()
            metrics = {"loss": loss_mean, "aux_loss": _mean_over_ranks(aux_sum, ctx.device), "tokens_per_s": tps,
                       "tokens": (step + 1) * tokens_per_step, "memory_gib": memory_gib(ctx.device),
                       "bad_steps": bad_total, **opt_stats, **router_metrics(stats, tally.last)}
            util = mfu(tps / max(ctx.world_size, 1), train_flops, peak)
            if util is not None:
                metrics["mfu"] = util
            run.log(metrics, step=step)
            history.write(step, metrics)
            final = metrics
            bar.set_postfix(loss=f"{loss_mean:.3f}", tok_s=f"{tps:,.0f}")
        if stats and (step % tc.hist_every == 0 or step == tc.steps - 1):
            for i, s in stats.items():
                run.log_histogram(f"router/load/layer{i}", s["tokens_per_expert"], step=step)
        for warning in health.observe(step, health_inputs(stats)):
            run.event("router_health", warning.message, layer=warning.layer, kind=warning.kind, step=step)
            log.warning("router health: %s", warning.message)
            if tc.router_health.stop_on_collapse:
                ckpt.save(step + 1, model, optimizer, _meta(loader, run, optimizer, bad_total))
                run.finish(status="failed")
                raise TrainingStopped(f"router collapse at step {step}: {warning.message}")
        if held_out is not None and ((step + 1) % tc.eval_every == 0 or step == tc.steps - 1):
            evaluation = evaluate(model, held_out, tc.eval_batches, ctx.device)
            run.log(evaluation, step=step)
            history.write(step, evaluation)
            final.update(evaluation)
        if (step + 1) % tc.checkpoint_every == 0 or step == tc.steps - 1:
            path = ckpt.save(step + 1, model, optimizer, _meta(loader, run, optimizer, bad_total))
            last_good = str(path)
            if is_main:
                run.artifact(str(path), kind="checkpoint")
        bar.update(1)
    bar.close()
    history.close()
    run.finish()
    return {**final, "run_id": run.id, "steps": tc.steps, "router_warnings": len(health.history), "total_params": counts.total, "active_params": counts.active,
            "checkpoint": last_good, "run_dir": str(out)}


def _meta(loader, run, optimizer, bad_total: int) -> dict[str, Any]:
    return {"data": loader.state_dict(), "tracker_run_id": run.id, "bad_steps": bad_total,
            "optim_step": optimizer.step_count}
