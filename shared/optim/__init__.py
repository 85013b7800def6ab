"""Optimizers: Muon for hidden matrices and expert stacks, AdamW for the rest, muP multipliers, schedules."""

from shared.optim.groups import GroupSpec, assign_optimizer, build_groups
from shared.optim.muon import Muon, newton_schulz
from shared.optim.optimizer import MultiOptimizer, ParamSum, build_optimizer, dtensor_param_sum
from shared.optim.scaling import lr_multiplier, muon_lr_multiplier
from shared.optim.schedule import lr_factor

__all__ = [
    "GroupSpec",
    "Muon",
    "MultiOptimizer",
    "ParamSum",
    "assign_optimizer",
    "build_groups",
    "build_optimizer",
    "dtensor_param_sum",
    "lr_factor",
    "lr_multiplier",
    "muon_lr_multiplier",
    "newton_schulz",
]
