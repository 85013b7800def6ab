"""Parallelism applied from outside the model: expert parallel (EP) and FSDP2 data parallel.

The model code knows nothing of distribution (as in torchtitan's `parallelize.py`): this module
swaps each MoE layer's `RoutedExperts` for `ExpertParallelExperts`, which holds this rank's slice
of the experts and exchanges tokens with all-to-all, and wraps the rest with FSDP2
(`fully_shard`), leaving the expert weights to EP.

Gradient bookkeeping: each rank's loss is the mean over its own tokens and the global loss is
the mean over ranks. FSDP2 averages the dense gradients. An expert's gradient arrives through the
all-to-all backward as the *sum* of every rank's contribution, so `finish_gradients` divides it
by the world size and, when experts are replicated over several EP groups, sums it over the
ranks holding the same experts. Router loads are summed over all ranks before the bias update so
every rank keeps identical biases.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed._functional_collectives import all_to_all_single_autograd

from shared.config.train import TrainConfig
from shared.kernels.dispatch import Routing, expert_swiglu, permute, route_by_expert, unpermute_combine
from shared.model.experts import RoutedExperts


class ExpertParallelExperts(nn.Module):
    """This rank's `E / ep_size` experts; tokens travel to their expert's rank and back.

    Forward (T tokens, K slots): sort the T·K assignments by global expert (rows for rank r are
    then contiguous), send each rank its rows (all-to-all with uneven splits), regroup the
    received rows by local expert, run the grouped SwiGLU, and reverse both steps. Dispatch uses
    `shared.kernels` exactly like the single-process layer, so results agree to rounding.
    """

    def __init__(self, full: RoutedExperts, ep_group: dist.ProcessGroup, ep_rank: int, ep_size: int) -> None:
        super().__init__()
        n_experts = full.w1_EFD.shape[0]
        if n_experts % ep_size:
            raise ValueError(f"ep_size ({ep_size}) must divide n_routed_experts ({n_experts})")
        self.n_experts, self.ep_size, self.ep_rank, self.group = n_experts, ep_size, ep_rank, ep_group
        self.n_local = n_experts // ep_size
        lo, hi = ep_rank * self.n_local, (ep_rank + 1) * self.n_local
        self.w1_EFD = nn.Parameter(full.w1_EFD.detach()[lo:hi].clone())
        self.w3_EFD = nn.Parameter(full.w3_EFD.detach()[lo:hi].clone())
        self.w2_EDF = nn.Parameter(full.w2_EDF.detach()[lo:hi].clone())
        self.backend = full.backend
        self.gmm = full.gmm  # the grouped GEMM (a low-precision wrapper when model.moe.precision says so)

    def _exchange_counts(self, counts_E: Tensor) -> Tensor:
        """counts_RL[s, l]: rows rank s sends to my local expert l."""
        send = counts_E.view(self.ep_size, self.n_local).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv

    def forward(self, x_TD: Tensor, idx_TK: Tensor, weights_TK: Tensor, capacity: int | None = None) -> tuple[Tensor, Routing]:
        K = idx_TK.shape[1]
        routing = route_by_expert(idx_TK, self.n_experts, capacity)
        x_AD = permute(x_TD, routing, K)
        recv_RL = self._exchange_counts(routing.counts_E)
        send_splits = routing.counts_E.view(self.ep_size, self.n_local).sum(1).tolist()
        recv_splits = recv_RL.sum(1).tolist()
        x_recv = all_to_all_single_autograd(x_AD, recv_splits, send_splits, self.group)
        # received rows are grouped (source rank, local expert); regroup to (local expert, source rank)
        block_sizes = recv_RL.reshape(-1)
        block_of_row = torch.repeat_interleave(torch.arange(block_sizes.numel(), device=x_TD.device), block_sizes)
        src, local = block_of_row // self.n_local, block_of_row % self.n_local
        order = torch.argsort(local * self.ep_size + src, stable=True)
        y_sorted = expert_swiglu(x_recv.index_select(0, order), self.w1_EFD, self.w3_EFD, self.w2_EDF,
                                 recv_RL.sum(0), self.backend, self.gmm)
        y_recv = torch.empty_like(y_sorted).index_copy(0, order, y_sorted)
        y_AD = all_to_all_single_autograd(y_recv, send_splits, recv_splits, self.group)
        return unpermute_combine(y_AD, routing, weights_TK), routing


def _ep_groups(world: int, ep_size: int) -> tuple[list[dist.ProcessGroup], list[dist.ProcessGroup]]:
    """EP groups hold consecutive ranks; replica groups hold the ranks with the same expert slice."""
    ep = [dist.new_group(list(range(g * ep_size, (g + 1) * ep_size))) for g in range(world // ep_size)]
    rep = [dist.new_group(list(range(i, world, ep_size))) for i in range(ep_size)]
    return ep, rep


def parallelize(model: nn.Module, tc: TrainConfig, rank: int, world: int) -> nn.Module:
    """Apply EP (ep_size > 1) and FSDP2 (world > 1) in place; a single process is left untouched."""
    model._ep_replica_group = None
    if world == 1:
        return model
    if tc.ep_size > 1:
        ep_groups, replica_groups = _ep_groups(world, tc.ep_size)
        group = ep_groups[rank // tc.ep_size]
        for layer in model.moe_layers():
            layer.experts = ExpertParallelExperts(layer.experts, group, rank % tc.ep_size, tc.ep_size)
        model._ep_replica_group = replica_groups[rank % tc.ep_size]
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(next(model.parameters()).device.type, (world,))
    experts = {p for layer in model.moe_layers() for p in layer.experts.parameters()} if tc.ep_size > 1 else set()
    # FSDP2 cannot shard 0-d parameters (e.g. the bungee scalar): keep them replicated, averaged by hand.
    scalars = {p for p in model.parameters() if p.ndim == 0}
    model._replicated_params = sorted(scalars, key=id)
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

        for i, block in enumerate(model.layers):
            model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=True)
    if tc.compile:
        for block in model.layers:
            block.compile()
    return model


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


@torch.no_grad()
def sync_router_loads(model: nn.Module) -> None:
    """Sum every MoE layer's accumulated loads over all ranks so biases stay identical everywhere."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for layer in model.moe_layers():
        dist.all_reduce(layer.load_accum_E)
