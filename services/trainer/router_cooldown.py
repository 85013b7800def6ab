"""A router-LR cooldown: over the last `router_lr_cooldown` of the steps the router's learning rate
falls linearly to 0 while everything else trains on its own schedule.

Why: the bias can only balance the router it sees; a router that keeps drifting under Adam up to the
last step leaves the bias (and any average of it) fitted to a router that no longer exists. With the
router slowing to a stop, the bias's last updates chase a fixed target.

How, without touching the optimizer: an Adam or Muon update is linear in its learning rate (the
moments do not depend on it, and decoupled decay is lr·wd·w), so scaling the change a step made to
the router's weights by f is the step at LR × f. The router's weights are copied before the step
and moved back by (1 − f) of the change after it.
"""

from __future__ import annotations

import torch
from torch import nn


def cooldown_factor(step: int, steps: int, fraction: float) -> float:
    """The router's LR factor at optimizer step `step` (0-based) of `steps`: 1 until the last
    round(fraction·steps) steps, then falling linearly to 0 at the last step."""
    cool = round(fraction * steps)
    if cool < 1:
        return 1.0
    return min(1.0, max(0.0, (steps - 1 - step) / cool))


class RouterCooldown:
    def __init__(self, model: nn.Module, fraction: float, steps: int) -> None:
        self.fraction, self.steps = fraction, steps
        self.params = [p for name, p in model.named_parameters() if ".router." in name]
        if fraction and not self.params:
            raise ValueError("model.moe.balance.router_lr_cooldown is set but the model has no router parameters")

    def factor(self, step: int) -> float:
        return cooldown_factor(step, self.steps, self.fraction)

    @torch.no_grad()
    def before_step(self, step: int) -> list[torch.Tensor] | None:
        """The router's weights before the optimizer step, when this step is scaled (None otherwise)."""
        return [p.detach().clone() for p in self.params] if self.factor(step) < 1.0 else None

    @torch.no_grad()
    def after_step(self, step: int, before: list[torch.Tensor] | None) -> None:
        """Scale the change the optimizer step made to the router's weights by this step's factor."""
        if before is None:
            return
        f = self.factor(step)
        for p, old in zip(self.params, before, strict=True):
            p.copy_(old + f * (p.detach() - old))  # p ← old + f·Δ: the step taken at LR × f
