"""Parameter groups from rules: name patterns and tensor shape decide Muon or AdamW.

Rules, in order (the Muon/Moonlight practice, Jordan 2024; Liu et al. 2025):
1. A name matching any `optim.adamw_patterns` regex (embeddings, output head, norms, router,
   biases, the bungee scalar) goes to AdamW.
2. A parameter that is not a matrix goes to AdamW: fewer than 2 dims (gains, biases, scalars),
   and, when the model says what its parameters are (`mup_scalings`, shared.model.mup), any
   role but "matrix" — convolution kernels, whose (C, 1, k) shape is no stack of matrices, and
   tables such as learned positions.
3. 2-D hidden matrices and 3-D expert stacks go to Muon (each expert orthogonalised on its own).
With `optim.name = adamw` everything goes to AdamW. Weight decay applies to ≥ 2-D tensors only, and
not to names matching `optim.no_decay_patterns` (the router, whose scale the balancing bias must
not outgrow).
Each parameter's muP LR multiplier depends on the optimizer it lands in (shared/optim/scaling.py).
Parameters are then split by (optimizer, LR multiplier, decay) so each torch param group has one
multiplier; every parameter lands in exactly one group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import nn

from shared.config.optim import OptimConfig
from shared.model.mup import ParamScaling, clean_name
from shared.optim.scaling import lr_multiplier


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


def assign_optimizer(name: str, ndim: int, cfg: OptimConfig, role: str | None = None) -> str:
    """'muon' or 'adamw' for one parameter, by the rules above."""
    if cfg.name == "adamw" or any(re.search(p, name) for p in cfg.adamw_patterns) or ndim < 2:
        return "adamw"
    if role is not None and role != "matrix":
        return "adamw"
    if ndim > 3:
        raise ValueError(f"parameter {name!r} has {ndim} dims; Muon takes 2-D or 3-D, add a pattern to optim.adamw_patterns")
    return "muon"


def build_groups(
    model: nn.Module,
    cfg: OptimConfig,
    lr_multipliers: Mapping[str, float] | None = None,
    scalings: Mapping[str, ParamScaling] | None = None,
) -> list[GroupSpec]:
    """Split `model`'s trainable parameters into groups.

    `scalings` ({name: ParamScaling}) gives each parameter's role and muP shape facts, from which
    its optimizer and LR multiplier follow; `lr_multipliers` ({name: multiplier}) overrides the
    multiplier by hand. Names are matched without activation-checkpoint / compile wrappers.
    """
    lr_multipliers = lr_multipliers or {}
    scalings = scalings or {}
    names = {clean_name(n) for n, _ in model.named_parameters()}
    unknown = set(lr_multipliers) - names
    if unknown:
        raise ValueError(f"lr_multipliers name parameters the model lacks: {sorted(unknown)[:5]}")
    groups: dict[tuple[str, float, bool], GroupSpec] = {}
    for raw_name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        name = clean_name(raw_name)
        scaling = scalings.get(name)
        opt = assign_optimizer(name, p.dim(), cfg, scaling.role if scaling else None)
        if name in lr_multipliers:
            mult = float(lr_multipliers[name])
        else:
            mult = lr_multiplier(scaling, opt, cfg.muon_lr_adjust) if scaling else 1.0
        if opt == "muon":
            mult *= cfg.muon_lr_ratio
        mult *= next((f for pattern, f in cfg.lr_scales.items() if re.search(pattern, name)), 1.0)
        decay = p.dim() >= 2 and not any(re.search(pattern, name) for pattern in cfg.no_decay_patterns)
        key = (opt, float(f"{mult:.9g}"), decay)  # equal multipliers up to rounding share a group
        spec = groups.setdefault(key, GroupSpec(*key))
        spec.names.append(name)
        spec.params.append(p)
    return sorted(groups.values(), key=lambda g: (g.optimizer, g.lr_mult, g.decay))
