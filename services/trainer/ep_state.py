"""Expert-parallel shards in checkpoints: every rank's experts saved, any layout loads them.

Under expert parallelism a rank's routed experts are plain tensors holding rows [r·E/ep, (r+1)·E/ep)
of each (E, …) weight, under the same name on every rank. torch.distributed.checkpoint treats
same-named plain tensors as replicated and keeps one copy (rank 0's), so a resumed run would
give every rank rank 0's experts and expert optimizer state. Here, only for the save/load call,
each such tensor (and every optimizer state tensor of the same shape) is presented as a DTensor
view on the (replicas, ep) mesh with placements [Replicate, Shard(0)] and its global shape: DCP
then stores each slice once with its offsets, and resharding on load comes for free — a
checkpoint written at EP=2 loads into one process's full (E, …) tensors, into FSDP2's shards at
EP=1, or into EP=2 slices again (DCP reads whatever saved chunks overlap each target piece).
The views share storage with the parameters (`DTensor.from_local` wraps, it does not copy), so a
load writes straight into them. The idea is the one torchtitan uses with EP DTensors; the model
code keeps its plain tensors and its fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from shared.model.mup import clean_name


@dataclass(frozen=True)
class ExpertLayout:
    mesh: DeviceMesh
    local_shapes: dict[str, torch.Size]  # clean FQN -> this rank's slice shape
    ep_size: int

    def global_shape(self, fqn: str) -> torch.Size:
        local = self.local_shapes[fqn]
        return torch.Size((local[0] * self.ep_size, *local[1:]))


def expert_layout(model: nn.Module) -> ExpertLayout | None:
    """The EP layout of a parallelized model, or None when its experts are not expert-parallel."""
    mesh = getattr(model, "_ep_mesh", None)
    if mesh is None:
        return None
    from services.trainer.parallel import expert_params

    experts = {id(p) for p in expert_params(model)}
    shapes = {clean_name(n): p.shape for n, p in model.named_parameters() if id(p) in experts}
    return ExpertLayout(mesh, shapes, model._ep_size)


def _view(t: torch.Tensor, layout: ExpertLayout, fqn: str) -> DTensor:
    shape = layout.global_shape(fqn)
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(t, layout.mesh, [Replicate(), Shard(0)], run_check=False, shape=shape, stride=stride)


def _matches(t: Any, layout: ExpertLayout, fqn: str) -> bool:
    return isinstance(t, torch.Tensor) and not isinstance(t, DTensor) and t.shape == layout.local_shapes[fqn]


def as_global(model_sd: dict[str, Any], optim_sd: dict[str, Any], layout: ExpertLayout | None) -> None:
    """In place: expert entries (weights and same-shaped optimizer state) become DTensor views."""
    if layout is None:
        return
    for fqn in layout.local_shapes:
        if _matches(model_sd.get(fqn), layout, fqn):
            model_sd[fqn] = _view(model_sd[fqn], layout, fqn)
        states = optim_sd.get("state", {})
        if fqn in states:  # a new dict: the one given may be the optimizer's live per-parameter state
            states[fqn] = {key: _view(v, layout, fqn) if _matches(v, layout, fqn) else v for key, v in states[fqn].items()}


def as_local(model_sd: dict[str, Any], optim_sd: dict[str, Any], layout: ExpertLayout | None) -> None:
    """In place: undo `as_global` (the views' local tensors, which the load has filled)."""
    if layout is None:
        return
    for fqn in layout.local_shapes:
        if isinstance(model_sd.get(fqn), DTensor):
            model_sd[fqn] = model_sd[fqn].to_local()
        states = optim_sd.get("state", {})
        if fqn in states:
            states[fqn] = {key: v.to_local() if isinstance(v, DTensor) else v for key, v in states[fqn].items()}
