"""Parameter groups from rules: name patterns and tensor shape decide Muon or AdamW.

Rules, in order (the Muon/Moonlight practice, Jordan 2024; Liu et al. 2025):
1. A name matching any `optim.adamw_patterns` regex (embeddings, output head, norms, router,
   biases, the bungee scalar) goes to AdamW.
2. Any tensor with fewer than 2 dims (gains, biases, scalars) goes to AdamW.
3. 2-D hidden matrices and 3-D expert stacks go to Muon (each expert orthogonalised on its own).
With `optim.name = adamw` everything goes to AdamW. Weight decay applies to ≥ 2-D tensors only.
Parameters are then split by (optimizer, LR multiplier, decay) so each torch param group has one
muP multiplier; every parameter lands in exactly one group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import nn

from shared.config.optim import OptimConfig


@dataclass
class GroupSpec:
    """One torch param group: which optimizer, its muP LR multiplier, whether it decays, and members."""

    optimizer: str
    lr_mult: float
    decay: bool
    names: list[str] = field(default_factory=list)
    params: list[nn.Parameter] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.optimizer}/lr_x{self.lr_mult:g}/{'decay' if self.decay else 'no_decay'}"  # tracker-safe key


def assign_optimizer(name: str, ndim: int, cfg: OptimConfig) -> str:
    """'muon' or 'adamw' for one parameter, by the rules above."""
    if cfg.name == "adamw" or any(re.search(p, name) for p in cfg.adamw_patterns) or ndim < 2:
        return "adamw"
    if ndim > 3:
        raise ValueError(f"parameter {name!r} has {ndim} dims; Muon takes 2-D or 3-D, add a pattern to optim.adamw_patterns")
    return "muon"


def build_groups(model: nn.Module, cfg: OptimConfig, lr_multipliers: Mapping[str, float] | None = None) -> list[GroupSpec]:
    """Split `model`'s trainable parameters into groups; `lr_multipliers` is {name: muP multiplier}."""
    lr_multipliers = lr_multipliers or {}
    unknown = set(lr_multipliers) - {n for n, _ in model.named_parameters()}
    if unknown:
        raise ValueError(f"lr_multipliers name parameters the model lacks: {sorted(unknown)[:5]}")
    groups: dict[tuple[str, float, bool], GroupSpec] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        opt = assign_optimizer(name, p.dim(), cfg)
        key = (opt, float(lr_multipliers.get(name, 1.0)), p.dim() >= 2)
        spec = groups.setdefault(key, GroupSpec(*key))
        spec.names.append(name)
        spec.params.append(p)
    return sorted(groups.values(), key=lambda g: (g.optimizer, g.lr_mult, g.decay))
