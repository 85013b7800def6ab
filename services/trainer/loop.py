"""The training loop every launch path runs: one function per worker process.

Per step (step.py): `grad_accum` micro-batches forward/backward (LM loss + the MoE aux losses), a
finite check agreed by all ranks (a NaN/Inf step is skipped and counted; `max_bad_steps` in a row
stop the run naming the last good checkpoint), the optimizer step (Muon + AdamW, schedule, muP;
the gradient norm and clipping global over every shard), the aux-loss-free router-bias update
from loads summed over all ranks. Then, here: metrics and router health from the global batch
(router_stats.py), held-out evaluation (evaluation.py) and checkpoints. Rank 0 also appends every
logged metric to `<run>/metrics.jsonl`, a local record that needs no tracker.
Checkpoints hold model, optimizer, router biases, RNG, data position and the tracker run id
(setup.py restores them), so a resumed run reproduces the uninterrupted one bitwise on CPU.
"""

from __future__ import annotations

import logging
from typing import Any

from services.trainer.evaluation import evaluate, suite_evaluator
from services.trainer.metrics import memory_gib, mfu
from services.trainer.parallel import mean_over_ranks
from services.trainer.router_calibration import calibrate_at_end
from services.trainer.router_stats import health_inputs, router_metrics
from services.trainer.setup import Worker, WorkerContext, run_dir, set_up
from services.trainer.step import MicroBatches, all_ranks_finite, apply_update, discard, forward_backward
from shared.config import ExperimentConfig

__all__ = ["TrainingStopped", "WorkerContext", "run_dir", "train_worker"]

log = logging.getLogger(__name__)


class TrainingStopped(RuntimeError):
    """The run cannot continue (too many bad steps, a collapsed router with stop_on_collapse)."""


def train_worker(cfg: ExperimentConfig, ctx: WorkerContext, resume: bool = False) -> dict[str, Any]:
    """Train `cfg` as rank `ctx.rank` of `ctx.world_size`; returns final metrics (rank 0's view)."""
    w = set_up(cfg, ctx, resume)
    tc = w.cfg.train
    bad_run, final = 0, {}
    suite = suite_evaluator(w.cfg, tc.seq_len)  # BPB per reference set + task suite; None when disabled
    for step in range(w.start, tc.steps):
        w.speed.start()
        micro = forward_backward(w, step)
        if not all_ranks_finite(w, micro):
            discard(w)
            bad_run += 1
            _count_bad_step(w, step, bad_run)
            w.speed.stop(0)
            w.bar.update(1)
            continue
        bad_run = 0
        opt_stats = apply_update(w)
        w.speed.stop(w.tokens_per_step)

        loss_mean = mean_over_ranks(micro.loss, ctx.device)
        micro.tally.reduce()
        stats = micro.tally.layer_stats()
        if step % tc.log_every == 0 or step == tc.steps - 1:
            final = _log_step(w, step, loss_mean, micro, opt_stats, stats)
        if stats and (step % tc.hist_every == 0 or step == tc.steps - 1):
            for i, s in stats.items():
                w.run.log_histogram(f"router/load/layer{i}", s["tokens_per_expert"], step=step)
        _watch_router_health(w, step, stats)
        if w.held_out is not None and ((step + 1) % tc.eval_every == 0 or step == tc.steps - 1):
            evaluation = evaluate(w.model, w.held_out, tc.eval_batches, ctx.device)
            w.run.log(evaluation, step=step)
            w.history.write(step, evaluation)
            final.update(evaluation)
        if suite is not None and ((step + 1) % tc.eval_every == 0 or step == tc.steps - 1):
            scores = suite(w.model, ctx.device)
            w.run.log(scores, step=step)
            w.history.write(step, scores)
            final.update(scores)
        if (step + 1) % tc.checkpoint_every == 0 or step == tc.steps - 1:
            path = w.ckpt.save(step + 1, w.model, w.optimizer, w.checkpoint_meta())
            w.last_good = str(path)
            if ctx.rank == 0:
                w.run.artifact(str(path), kind="checkpoint")
        w.bar.update(1)
    if w.cfg.model.moe.balance.calibrate_at_end and w.start < tc.steps:
        calibration = calibrate_at_end(w)  # the final checkpoint gets the frozen model's re-solved eval bias
        w.run.log(calibration, step=tc.steps - 1)
        final.update(calibration)
    w.bar.close()
    w.history.close()
    delivery = w.run.finish()
    (log.info if delivery.complete or delivery.mode == "disabled" else log.warning)("%s", delivery.summary())
    # flat `tracker_*` scalars: the Ray path reports only scalar values
    tracked = {f"tracker_{k}": v for k, v in delivery.as_dict().items() if k != "run_id"}
    return {**final, "run_id": w.run.id, **tracked, "steps": tc.steps,
            "router_warnings": len(w.health.history), "total_params": w.counts.total,
            "active_params": w.counts.active, "checkpoint": w.last_good, "run_dir": str(w.out)}


def _count_bad_step(w: Worker, step: int, bad_run: int) -> None:
    """Record a skipped non-finite step; stop the run after `max_bad_steps` of them in a row."""
    w.bad_total += 1
    w.run.event("bad_step", f"step {step}: non-finite loss or gradients, step skipped", step=step)
    log.warning("step %d: non-finite loss or gradients; skipped (%d in a row)", step, bad_run)
    if bad_run >= w.cfg.train.max_bad_steps:
        w.run.finish(status="failed")
        raise TrainingStopped(
            f"{bad_run} consecutive non-finite steps (max_bad_steps={w.cfg.train.max_bad_steps}) at step {step}; "
            f"last good checkpoint: {w.last_good or 'none'}"
        )


def _log_step(w: Worker, step: int, loss_mean: float, micro: MicroBatches, opt_stats: dict[str, float],
              stats: dict) -> dict[str, Any]:
    """The step's metrics (global loss, throughput, MFU, memory, optimizer and router statistics),
    to the tracker and metrics.jsonl; returns them."""
    device = w.ctx.device
    tps = w.speed.rate()
    metrics = {"loss": loss_mean, "aux_loss": mean_over_ranks(micro.aux_loss, device), "tokens_per_s": tps,
               "tokens": (step + 1) * w.tokens_per_step, "memory_gib": memory_gib(device),
               "bad_steps": w.bad_total, **opt_stats, **router_metrics(stats, micro.tally.last, w.cfg.model.moe.top_k)}
    util = mfu(tps / max(w.ctx.world_size, 1), w.train_flops, w.peak_flops)
    if util is not None:
        metrics["mfu"] = util
    w.run.log(metrics, step=step)
    w.history.write(step, metrics)
    w.bar.set_postfix(loss=f"{loss_mean:.3f}", tok_s=f"{tps:,.0f}")
    return metrics


def _watch_router_health(w: Worker, step: int, stats: dict) -> None:
    """Warn on a failing router (persistent MaxVio, dead experts, entropy collapse); with `stop_on_collapse`,
    checkpoint and stop the run."""
    for warning in w.health.observe(step, health_inputs(stats)):
        w.run.event("router_health", warning.message, layer=warning.layer, kind=warning.kind, step=step)
        log.warning("router health: %s", warning.message)
        if w.cfg.train.router_health.stop_on_collapse:
            w.ckpt.save(step + 1, w.model, w.optimizer, w.checkpoint_meta())
            w.run.finish(status="failed")
            raise TrainingStopped(f"router collapse at step {step}: {warning.message}")
