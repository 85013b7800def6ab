"""Optimizers: Muon for hidden matrices and expert stacks, AdamW for the rest, muP multipliers, schedules."""

from shared.optim.groups import GroupSpec, assign_optimizer, build_groups
from shared.optim.muon import Muon, newton_schulz
from shared.optim.optimizer import MultiOptimizer, build_optimizer
from shared.optim.schedule import lr_factor

__all__ = [
    "GroupSpec",
    "Muon",
    "MultiOptimizer",
    "assign_optimizer",
    "build_groups",
    "build_optimizer",
    "lr_factor",
    "newton_schulz",
]
