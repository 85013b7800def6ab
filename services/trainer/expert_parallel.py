"""Expert parallelism (EP): each rank holds a slice of the routed experts and exchanges tokens with all-to-all.

`ExpertParallelExperts` replaces a MoE layer's `RoutedExperts` from outside the model (the model
code knows nothing of distribution): permute by expert, send each rank the rows of its experts,
run the local grouped SwiGLU, send the outputs back, combine. `parallelize` (parallel.py) applies
it to every MoE layer through `expert_parallel_layer`.

Overlap (`train.ep_overlap`): each MoE layer's tokens are split in two halves whose all-to-alls
run in the background (`async_op=True`, which gloo and NCCL both support for
`all_to_all_single`) while the other half's experts compute, and the shared experts run while the
dispatch is in flight (the idea of DeepSeek-V3's DualPipe, in its simplest two-chunk form). The
backward is overlapped too, by `_AsyncAllToAll`: see there. Why our own: torch's autograd-aware
`all_to_all_single_autograd` (the plain path, as in torchtitan's EP) waits at the output's first
use and waits at once in its backward, so nothing can run under it either way. Results equal
the plain path up to the rounding of GEMMs over fewer rows (tested to 1e-5). Measured in
benchmarks/ep_overlap.py and docs/trainer.md.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed._functional_collectives import all_to_all_single_autograd

from shared.kernels.dispatch import Routing, expert_swiglu, permute, route_by_expert, unpermute_combine
from shared.model.experts import RoutedExperts


class _AsyncAllToAll:
    """One all-to-all of rows that runs in the background between `start` and `wait`, both ways.

    Forward: `start` launches `all_to_all_single(async_op=True)` and returns the output buffer
    (not yet filled); `wait` blocks until it is. Backward is the mirror image: `wait`'s backward
    launches the reverse all-to-all of the gradient and returns at once, `start`'s backward blocks
    on it. Between the two, autograd's engine runs whatever else is ready, and it picks the most
    recently created node first, i.e. the backward of the computation that followed in the forward
    (the other half's experts, the shared experts): the forward overlap, reversed. Every rank
    builds the same graph, so every rank issues the collectives in the same order.

    `blocked_s` (class-wide) sums the seconds spent blocked in waits, the communication the
    overlap failed to hide (benchmarks/ep_overlap.py reports it). `wait_at_once` (class-wide, a
    control for that benchmark) blocks right after each launch: the same halves, no overlap.
    """

    blocked_s = 0.0
    wait_at_once = False

    def __init__(self, group: dist.ProcessGroup, out_splits: list[int], in_splits: list[int]) -> None:
        self.group, self.out_splits, self.in_splits = group, out_splits, in_splits
        self.work = self.held = self.grad_buf = None

    def launch(self, x: Tensor, out_splits: list[int], in_splits: list[int]) -> Tensor:
        x = x.contiguous()
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        self.work = dist.all_to_all_single(out, x, out_splits, in_splits, group=self.group, async_op=True)
        self.held = x  # the send buffer must outlive the transfer
        if _AsyncAllToAll.wait_at_once:
            self.block()
        return out

    def block(self) -> None:
        if self.work is None:  # already waited (wait_at_once)
            return
        t0 = time.perf_counter()
        self.work.wait()
        _AsyncAllToAll.blocked_s += time.perf_counter() - t0
        self.work = self.held = None

    def start(self, x: Tensor) -> Tensor:
        return _A2AStart.apply(x, self)

    def wait(self, buf: Tensor) -> Tensor:
        return _A2AWait.apply(buf, self)


class _A2AStart(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, a2a: _AsyncAllToAll) -> Tensor:
        ctx.a2a = a2a
        return a2a.launch(x, a2a.out_splits, a2a.in_splits)

    @staticmethod
    def backward(ctx, _grad_out: Tensor):
        # `_grad_out` is what `_A2AWait.backward` passed through (the gradient being sent); the
        # gradient of `x` is the reverse all-to-all's output, complete once it has finished.
        a2a = ctx.a2a
        a2a.block()
        grad_x, a2a.grad_buf = a2a.grad_buf, None
        return grad_x, None


class _A2AWait(torch.autograd.Function):
    @staticmethod
    def forward(ctx, buf: Tensor, a2a: _AsyncAllToAll) -> Tensor:
        ctx.a2a = a2a
        a2a.block()
        return buf

    @staticmethod
    def backward(ctx, grad: Tensor):
        a2a = ctx.a2a
        a2a.grad_buf = a2a.launch(grad, a2a.in_splits, a2a.out_splits)  # reverse all-to-all, in the background
        return grad, None  # passed on unchanged (and unread) to `_A2AStart.backward`


class _EarlyShared:
    """Mixin swapped onto a MoE layer's shared-expert module (the way FSDP2 swaps classes) so the
    EP layer can run it while its dispatch all-to-all is in flight; the MoE layer's own call with
    the same input tensor then returns that result instead of computing it again. Parameters,
    names and numerics are unchanged; the model code is untouched."""

    _early: tuple[Tensor, Tensor] | None = None

    def run_early(self, x: Tensor) -> None:
        self._early = None
        self._early = (x, self(x))

    def forward(self, x: Tensor) -> Tensor:
        early, self._early = self._early, None
        if early is not None and early[0] is x:
            return early[1]
        return super().forward(x)


@functools.cache
def _early_class(cls: type) -> type:
    return type(f"Early{cls.__name__}", (_EarlyShared, cls), {})


def route_halves(idx_TK: Tensor, n_experts: int, capacity: int | None, t_split: int) -> tuple[Routing, list[Routing]]:
    """Routing of all T tokens, and of tokens [0, t_split) and [t_split, T) as routings of their own.

    Dropless, each half is simply routed alone. With a capacity, each half's routing is the full
    routing's kept assignments that fall in it (expert order kept), so the overlapped layer drops
    exactly the assignments the plain one drops; drops are counted once, on the full routing.
    """
    full = route_by_expert(idx_TK, n_experts, capacity)
    T = idx_TK.shape[0]
    if capacity is None:
        return full, [route_by_expert(part, n_experts) for part in idx_TK.split([t_split, T - t_split])]
    s_split = t_split * idx_TK.shape[1]
    expert_A = torch.repeat_interleave(torch.arange(n_experts, device=idx_TK.device), full.counts_E)
    first_A = full.order_A < s_split
    halves = []
    for keep_A, offset in ((first_A, 0), (~first_A, s_split)):
        counts_E = torch.bincount(expert_A[keep_A], minlength=n_experts)
        halves.append(Routing(full.order_A[keep_A] - offset, counts_E, torch.zeros_like(full.dropped)))
    return full, halves


class ExpertParallelExperts(nn.Module):
    """This rank's `E / ep_size` experts; tokens travel to their expert's rank and back.

    Forward (T tokens, K slots): sort the T·K assignments by global expert (rows for rank r are
    then contiguous), send each rank its rows (all-to-all with uneven splits), regroup the
    received rows by local expert, run the grouped SwiGLU, and reverse both steps. Dispatch uses
    `shared.kernels` exactly like the single-process layer, so results agree to rounding.

    With `overlap` the tokens go as two halves, pipelined: both dispatches are launched, the
    shared experts (if `run_shared_early` was called) compute while they travel, half 1's experts
    compute while half 2's dispatch travels, half 2's while half 1's combine travels.
    """

    def __init__(self, full: RoutedExperts, ep_group: dist.ProcessGroup, ep_rank: int, ep_size: int,
                 overlap: bool = False) -> None:
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
        self.overlap = overlap
        self._shared: tuple[_EarlyShared, ...] = ()  # a tuple, so it is not registered as a submodule

    def run_shared_early(self, shared: nn.Module) -> None:
        """Compute `shared` (the MoE layer's shared experts) during the dispatch (overlap only)."""
        shared.__class__ = _early_class(type(shared))
        self._shared = (shared,)

    def _exchange_counts(self, counts_CE: Tensor) -> Tensor:
        """counts_CRL[c, s, l]: rows of chunk c that rank s sends to my local expert l."""
        C = counts_CE.shape[0]
        send = counts_CE.view(C, self.ep_size, self.n_local).transpose(0, 1).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv.transpose(0, 1)

    def _local_experts(self, x_recv: Tensor, recv_RL: Tensor) -> Tensor:
        """My experts on rows received grouped (source rank, local expert); outputs in the same order."""
        # regroup to (local expert, source rank), run the grouped SwiGLU, put rows back
        block_sizes = recv_RL.reshape(-1)
        block_of_row = torch.repeat_interleave(torch.arange(block_sizes.numel(), device=x_recv.device), block_sizes)
        src, local = block_of_row // self.n_local, block_of_row % self.n_local
        order = torch.argsort(local * self.ep_size + src, stable=True)
        y_sorted = expert_swiglu(x_recv.index_select(0, order), self.w1_EFD, self.w3_EFD, self.w2_EDF,
                                 recv_RL.sum(0), self.backend, self.gmm)
        return torch.empty_like(y_sorted).index_copy(0, order, y_sorted)

    def forward(self, x_TD: Tensor, idx_TK: Tensor, weights_TK: Tensor, capacity: int | None = None) -> tuple[Tensor, Routing]:
        if self.overlap:
            return self._forward_overlapped(x_TD, idx_TK, weights_TK, capacity)
        K = idx_TK.shape[1]
        routing = route_by_expert(idx_TK, self.n_experts, capacity)
        x_AD = permute(x_TD, routing, K)
        recv_RL = self._exchange_counts(routing.counts_E[None])[0]
        send_splits = routing.counts_E.view(self.ep_size, self.n_local).sum(1).tolist()
        recv_splits = recv_RL.sum(1).tolist()
        x_recv = all_to_all_single_autograd(x_AD, recv_splits, send_splits, self.group)
        y_recv = self._local_experts(x_recv, recv_RL)
        y_AD = all_to_all_single_autograd(y_recv, send_splits, recv_splits, self.group)
        return unpermute_combine(y_AD, routing, weights_TK), routing

    def _forward_overlapped(self, x_TD: Tensor, idx_TK: Tensor, weights_TK: Tensor,
                            capacity: int | None) -> tuple[Tensor, Routing]:
        T, K = idx_TK.shape
        sizes = [T // 2, T - T // 2]  # a half may be empty; every rank still runs both exchanges
        routing, halves = route_halves(idx_TK, self.n_experts, capacity, sizes[0])
        x_parts, w_parts = x_TD.split(sizes), weights_TK.split(sizes)
        x_AD = [permute(x, r, K) for x, r in zip(x_parts, halves, strict=True)]
        counts_CE = torch.stack([r.counts_E for r in halves])
        recv_CRL = self._exchange_counts(counts_CE)
        send = counts_CE.view(2, self.ep_size, self.n_local).sum(2).tolist()
        recv = recv_CRL.sum(2).tolist()
        dispatch = [_AsyncAllToAll(self.group, recv[c], send[c]) for c in range(2)]
        combine = [_AsyncAllToAll(self.group, send[c], recv[c]) for c in range(2)]
        in_flight = [dispatch[c].start(x_AD[c]) for c in range(2)]
        for shared in self._shared:
            shared.run_early(x_TD)  # while both dispatches travel
        back = []
        for c in range(2):  # half 1's experts while half 2's dispatch travels, then half 2's while half 1 returns
            y_recv = self._local_experts(dispatch[c].wait(in_flight[c]), recv_CRL[c])
            back.append(combine[c].start(y_recv))
        y_TD = [unpermute_combine(combine[c].wait(back[c]), halves[c], w_parts[c]) for c in range(2)]
        return torch.cat(y_TD), routing


def expert_parallel_layer(layer: nn.Module, group: dist.ProcessGroup, ep_rank: int, ep_size: int,
                          overlap: bool = False) -> nn.Module:
    """Make one MoE layer expert parallel in place: its routed experts become this rank's slice,
    and with `overlap` its shared experts run while the dispatch all-to-all is in flight."""
    layer.experts = ExpertParallelExperts(layer.experts, group, ep_rank, ep_size, overlap)
    if overlap and getattr(layer, "shared", None) is not None:
        layer.experts.run_shared_early(layer.shared)
    return layer
