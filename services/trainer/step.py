"""One optimizer step: the micro-batches' forward and backward, the finite check, the update.

- `forward_backward`: `grad_accum` micro-batches of LM loss + the MoE aux losses, each backward
  scaled by 1/grad_accum. With per-micro-batch bias updates the router loads are summed over
  ranks and the biases moved after each backward: a recomputed (checkpointed) forward must route
  as the first one did.
- `all_ranks_finite`: a NaN/Inf loss or gradient on any rank makes the step bad on every rank, so
  all ranks skip it together (a rank that stepped alone would leave the replicas apart);
  `discard` drops a bad step's gradients and router loads.
- `apply_update`: gradients finished over every shard (expert-gradient scaling, the global norm
  and clipping), delayed fp8 amaxes synced, the watched parts' gradient norms taken before the
  step (clipping rescales them), the optimizer step (the router's change scaled by its cooldown
  factor, `router_cooldown.py`), then, with per-step bias updates, the aux-loss-free router-bias
  update from loads summed over all ranks (or summed further over a token window, `bias_window.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from services.trainer.parallel import all_ranks_max, finish_gradients, sync_delayed_amaxes, sync_router_loads
from services.trainer.router_stats import RouterTally
from services.trainer.setup import Worker


def lm_loss(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits_BTV.float().reshape(-1, logits_BTV.shape[-1]), targets_BT.reshape(-1))


@dataclass
class MicroBatches:
    """This rank's view of one step's micro-batches: mean LM and aux loss, and the router loads."""

    loss: float
    aux_loss: float
    tally: RouterTally


def forward_backward(w: Worker, step: int) -> MicroBatches:
    tc, device = w.cfg.train, w.ctx.device
    loss_sum, aux_sum, tally = 0.0, 0.0, RouterTally()
    # full router statistics only where the loop logs them (its cadence), the loads every step
    w.model.set_full_stats(step % tc.log_every == 0 or step == tc.steps - 1)
    for _ in range(tc.grad_accum):
        batch = next(w.loader)
        with w.autocast:
            _, aux = w.model(batch.inputs_BT.to(device), batch.targets_BT.to(device))
        loss = aux["lm_loss"]  # the model's head and loss fused: no logits tensor
        if step in tc.fault_inject_nan_steps:
            loss = loss * float("nan")
        ((loss + aux["aux_loss"]) / tc.grad_accum).backward()
        if w.per_micro_batch:  # after the backward: a recomputed forward must route as the first did
            sync_router_loads(w.model)
            w.bias_updates(w.tokens_per_step / tc.grad_accum)
        loss_sum += float(loss.detach()) / tc.grad_accum
        aux_sum += float(aux["aux_loss"].detach()) / tc.grad_accum
        tally.add(aux["layers"])
    return MicroBatches(loss_sum, aux_sum, tally)


def _grads_finite(model: torch.nn.Module) -> bool:
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            if not torch.isfinite(g).all():
                return False
    return True


def all_ranks_finite(w: Worker, micro: MicroBatches) -> bool:
    bad = not (math.isfinite(micro.loss) and _grads_finite(w.model))
    return not all_ranks_max(float(bad), w.ctx.device) > 0


def discard(w: Worker) -> None:
    w.optimizer.zero_grad()
    for layer in w.model.moe_layers():
        layer.load_accum_E.zero_()


def apply_update(w: Worker) -> dict[str, float]:
    """Finish the gradients, step the optimizer, move the router biases; returns the optimizer's
    statistics (LR, gradient norms per group) and the watched parts' gradient norms."""
    finish_gradients(w.model, w.cfg.train, w.ctx.world_size)
    sync_delayed_amaxes(w.model)
    part_norms = {f"grad_norm/{part}": float(w.optimizer.grad_norm(ps)) for part, ps in w.watched.items()
                  if all(p.grad is not None for p in ps)}  # before the step: clipping rescales grads
    step = w.optimizer.step_count  # the schedule's step: skipped steps do not count
    router_before = w.router_cooldown.before_step(step)
    opt_stats = {**w.optimizer.step(), **part_norms}
    w.router_cooldown.after_step(step, router_before)
    if w.router_cooldown.fraction:
        opt_stats["router_lr_factor"] = w.router_cooldown.factor(step)
    w.optimizer.zero_grad()
    if not w.per_micro_batch:
        sync_router_loads(w.model)
        w.bias_updates(w.tokens_per_step)
    return opt_stats
