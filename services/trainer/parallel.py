"""Parallelism applied from outside the model: expert parallel (EP) and FSDP2 data parallel.

The model code knows nothing of distribution (as in torchtitan's `parallelize.py`): this module
swaps each MoE layer's `RoutedExperts` for `ExpertParallelExperts` (expert_parallel.py), which
holds this rank's slice of the experts and exchanges tokens with all-to-all, and wraps the rest
with FSDP2 (`fully_shard`), leaving the expert weights to EP.

Gradient bookkeeping: each rank's loss is the mean over its own tokens and the global loss is
the mean over ranks. FSDP2 averages the dense gradients. Delayed fp8 amax histories are
max-reduced over ranks after each step (`sync_delayed_amaxes`). An expert's gradient arrives through the
all-to-all backward as the *sum* of every rank's contribution, so `finish_gradients` divides it
by the world size and, when experts are replicated over several EP groups, sums it over the
ranks holding the same experts. Router loads are summed over all ranks before the bias update so
every rank keeps identical biases.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor

from services.trainer.expert_parallel import ExpertParallelExperts, expert_parallel_layer, route_halves
from shared.config.train import TrainConfig
from shared.precision.delayed import DelayedScalingState

__all__ = ["ExpertParallelExperts", "all_ranks_max", "apply_block_options", "expert_parallel_layer", "expert_params",
           "finish_gradients", "global_param_sum", "mean_over_ranks", "parallelize", "route_halves",
           "sync_delayed_amaxes", "sync_router_loads"]


def _ep_mesh(device_type: str, world: int, ep_size: int) -> DeviceMesh:
    """A (replicas, ep) mesh: EP groups are consecutive ranks (a row), replica groups hold the ranks
    with the same expert slice (a column). Checkpoints describe expert shards on it (ep_state.py)."""
    return init_device_mesh(device_type, (world // ep_size, ep_size), mesh_dim_names=("ep_replicate", "ep"))


def parallelize(model: nn.Module, tc: TrainConfig, rank: int, world: int) -> nn.Module:
    """Apply EP (ep_size > 1) and FSDP2 (world > 1) in place; a single process is left untouched."""
    model._ep_replica_group = None
    model._ep_mesh = None
    model._ep_size = 1
    model._world = world
    model._replicated_params = []
    if world == 1:
        return model
    device_type = next(model.parameters()).device.type
    if tc.ep_size > 1:
        mesh = _ep_mesh(device_type, world, tc.ep_size)
        for layer in model.moe_layers():
            expert_parallel_layer(layer, mesh.get_group("ep"), rank % tc.ep_size, tc.ep_size, tc.ep_overlap)
        model._ep_replica_group = mesh.get_group("ep_replicate")
        model._ep_mesh = mesh
        model._ep_size = tc.ep_size
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device_type, (world,))
    experts = {p for layer in model.moe_layers() for p in layer.experts.parameters()} if tc.ep_size > 1 else set()
    # FSDP2 cannot shard 0-d parameters (e.g. the bungee scalar): keep them replicated, averaged by hand.
    # In name order: every rank must all-reduce them in the same order (memory addresses differ).
    model._replicated_params = [p for _, p in model.named_parameters() if p.ndim == 0]
    scalars = set(model._replicated_params)
    ignored = experts | scalars
    for block in model.layers:
        fully_shard(block, mesh=mesh, ignored_params=ignored & set(block.parameters()) or None)
    fully_shard(model, mesh=mesh, ignored_params=ignored or None)
    return model


def apply_block_options(model: nn.Module, tc: TrainConfig) -> nn.Module:
    """Activation checkpointing and torch.compile, applied per transformer block from outside the
    model (torchtitan's order: checkpoint the block, then compile it). A recomputed MoE forward
    adds its loads to the bias-update accumulator a second time; the update uses only the sign of
    (mean − load), which doubling every load leaves unchanged."""
    if tc.activation_checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        extra = {"context_fn": selective_checkpoint_context} if tc.activation_checkpointing_policy == "selective" else {}
        for i, block in enumerate(model.layers):
            model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=True, **extra)
    if tc.compile:
        for block in model.layers:
            block.compile()
    return model


def _saved_ops() -> frozenset:
    """The operators whose outputs selective checkpointing keeps: the GEMMs (plain, batched,
    grouped) and the attention kernels — the expensive part of a block's forward. Everything
    between them (norms, activations, routing, copies) is recomputed (torchtitan's op-level policy)."""
    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "baddbmm", "_grouped_mm", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
             "_scaled_dot_product_flash_attention_for_cpu", "_scaled_mm")
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


def selective_checkpoint_context():
    """The `context_fn` of selective activation checkpointing (`torch.utils.checkpoint`)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = _saved_ops()

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def expert_params(model: nn.Module) -> list[nn.Parameter]:
    return [p for layer in model.moe_layers() if isinstance(layer.experts, ExpertParallelExperts)
            for p in layer.experts.parameters()]


@torch.no_grad()
def finish_gradients(model: nn.Module, tc: TrainConfig, world: int) -> None:
    """Average replicated scalars over ranks; scale EP expert gradients to the global mean loss and
    sum them over expert replicas."""
    for p in getattr(model, "_replicated_params", []):
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)
    params = [p for p in expert_params(model) if p.grad is not None]
    if not params:
        return
    for p in params:
        p.grad.div_(world)
    group = getattr(model, "_ep_replica_group", None)
    if group is not None and world // tc.ep_size > 1:
        for p in params:
            dist.all_reduce(p.grad, group=group)


def global_param_sum(model: nn.Module):
    """The optimizer's `ParamSum` for this layout: per-parameter local sums → one global sum, each
    element counted once, in one all-reduce. FSDP2 DTensor pieces are disjoint (summed over all
    ranks); an EP shard is disjoint within its EP group and repeated in every replica group (so
    divided by the number of replicas); the replicated scalars are whole on every rank (÷ world)."""
    world = getattr(model, "_world", 1)
    experts = {id(p) for p in expert_params(model)}
    replicas = world // getattr(model, "_ep_size", 1)
    device = next(model.parameters()).device  # NCCL reduces device tensors only

    def param_sum(pairs) -> torch.Tensor:
        parts = torch.zeros(3, dtype=torch.float64, device=device)
        for p, value in pairs:
            slot = 0 if isinstance(p, DTensor) else 1 if id(p) in experts else 2
            parts[slot] += value.detach().double().to(device)
        if world == 1:
            return parts.sum().float().cpu()
        total = (parts[0] + parts[1] / replicas + parts[2] / world).reshape(1)
        dist.all_reduce(total)
        return total[0].float().cpu()

    return param_sum


@torch.no_grad()
def sync_delayed_amaxes(model: nn.Module) -> None:
    """Max-reduce every delayed-fp8 amax history's new rows over all ranks, in name order, so
    every rank derives the same scales (a no-op in one process or without delayed scaling)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for _, module in sorted(model.named_modules(), key=lambda item: item[0]):
        if isinstance(module, DelayedScalingState):
            module.reduce_amax_()


@torch.no_grad()
def sync_router_loads(model: nn.Module) -> None:
    """Sum every MoE layer's accumulated loads over all ranks so biases stay identical everywhere."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for layer in model.moe_layers():
        dist.all_reduce(layer.load_accum_E)


def all_ranks_max(value: float, device: torch.device) -> float:
    """The largest `value` over all ranks (the value itself in one process)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def mean_over_ranks(value: float, device: torch.device) -> float:
    """The mean of `value` over all ranks: the global loss when each rank's is the mean over its own tokens."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()
