"""Learning-rate schedules as a factor of the peak LR: warmup + cosine, WSD, constant.

- cosine: linear warmup, then half a cosine from 1 to `min_lr_ratio` at the last step.
- wsd (warmup–stable–decay; Hu et al. 2024, MiniCPM, arXiv 2404.06395): linear warmup, constant
  until the last `decay_fraction` of training, then linear decay to `min_lr_ratio`. The stable
  phase lets one run be branched into several decays.
- constant: linear warmup, then 1.
"""

from __future__ import annotations

import math

from shared.config.optim import OptimConfig


def lr_factor(step: int, total_steps: int, cfg: OptimConfig) -> float:
    """Multiplier on the peak LR at `step` (0-based) of a `total_steps` run."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    floor = cfg.min_lr_ratio
    last = max(total_steps - 1, 1)
    if cfg.schedule == "cosine":
        span = max(last - cfg.warmup_steps, 1)
        progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_start = max(cfg.warmup_steps, round(total_steps * (1 - cfg.decay_fraction)))
    if step < decay_start:
        return 1.0
    progress = min((step - decay_start) / max(last - decay_start, 1), 1.0)
    return 1.0 - (1.0 - floor) * progress
