"""Expert dispatch: permute tokens by expert → grouped SwiGLU GEMMs → unpermute and combine.

The DeepSeek-style MoE sends each token to `top_k` experts. Rather than loop over tokens, we sort
the S = T·K (token, slot) assignments by expert (a stable sort, so ties keep token order and the
result is bitwise reproducible), run each expert's rows as one block of a grouped GEMM, and sum
each token's expert outputs back into its row.

Two choices that make it fast on CPU, both measured (docs/moe.md):
- Both directions move rows through the *token* index of each assignment, `tok_A`: the permute
  gathers x[tok_A] (its backward accumulates into T rows with `index_add_`), the combine
  accumulates y into T rows with `index_add_` (its backward gathers grad[tok_A]). Every gather
  reads from a T-row tensor that stays in cache and every accumulation writes into one, so no
  T·K-row tensor is ever gathered at random: one T·K×D pass per direction. On CPU `index_add_`
  walks the index in order, so the sums are deterministic (bitwise reproducible runs). On CUDA
  `index_add_` accumulates with atomics (bf16 sums that change from run to run), so there both
  accumulations gather the K rows of each token back into slot order and sum them over k instead
  (`combine_method`: one S×D gather per direction, no atomics, the same bits every run).
- The routing weight of each assignment multiplies the expert's hidden activation (width F)
  before w2 rather than its output (width D): w2·(s·h) = s·(w2·h), and F ≤ D for fine-grained
  experts, so the weighting touches fewer numbers and the combine is a plain sum.

Optional capacity (Switch Transformer, Fedus et al. 2021): each expert keeps at most `capacity`
assignments in token order; the rest are dropped and counted. Dropped assignments are simply
absent from `order_A`, so the same gather / accumulate path gives them a zero contribution.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from shared.kernels.expert_path_autotune import TUNER as PATH_TUNER
from shared.kernels.expert_threads import explicit_setting, use_expert_threads
from shared.kernels.fused_experts import fused_routed_experts
from shared.kernels.grouped_mm import grouped_mm
from shared.kernels.histogram import expert_histogram

# (x_TI, w_EOI, counts_E, backend) -> y_TO, differentiable; `grouped_mm` or a precision wrapper of it.
GroupedMM = Callable[[Tensor, Tensor, Tensor, str], Tensor]


@dataclass
class Routing:
    """Where the S = T·K assignments go after sorting by expert.

    order_A: for each kept assignment in expert order, its flat slot index t·K + k (A ≤ S).
    counts_E: kept assignments per expert. dropped: assignments removed by capacity (0-d tensor).
    """

    order_A: Tensor
    counts_E: Tensor
    dropped: Tensor


def route_by_expert(idx_TK: Tensor, n_experts: int, capacity: int | None = None) -> Routing:
    """Sort the (token, slot) assignments by expert; apply a per-expert capacity if given."""
    flat_S = idx_TK.reshape(-1)
    order_A = torch.argsort(flat_S, stable=True)
    counts_E = expert_histogram(flat_S, n_experts)  # no host sync (shared.kernels.histogram)
    if capacity is None:
        return Routing(order_A, counts_E, torch.zeros((), dtype=torch.long, device=idx_TK.device))
    expert_A = flat_S[order_A]
    start_E = torch.cumsum(counts_E, 0) - counts_E
    rank_A = torch.arange(order_A.numel(), device=idx_TK.device) - start_E[expert_A]
    keep_A = rank_A < capacity
    kept_E = counts_E.clamp(max=capacity)
    return Routing(order_A[keep_A], kept_E, (counts_E - kept_E).sum())


class _PermuteGatherBackward(torch.autograd.Function):
    """x[tok_A] whose backward sums each token's K gradient rows in slot order (no atomics)."""

    @staticmethod
    def forward(ctx, x_TD: Tensor, tok_A: Tensor, row_S: Tensor, top_k: int) -> Tensor:
        ctx.save_for_backward(row_S)
        ctx.top_k, ctx.n_rows = top_k, tok_A.numel()
        return x_TD.index_select(0, tok_A)

    @staticmethod
    def backward(ctx, g_AD: Tensor):
        (row_S,) = ctx.saved_tensors
        if ctx.n_rows < row_S.numel():  # dropped slots read an appended zero row
            g_AD = torch.cat([g_AD, g_AD.new_zeros(1, g_AD.shape[1])])
        K = ctx.top_k
        return g_AD[row_S].view(row_S.numel() // K, K, g_AD.shape[1]).sum(1), None, None, None


def permute(x_TD: Tensor, routing: Routing, top_k: int, method: str = "auto") -> Tensor:
    """Rows of x gathered in expert order: row a is token `order_A[a] // top_k`.

    The backward sums the K copies of a token's gradient into its row: with `index_add` (autograd's
    backward of `index_select`, one pass) or, with `gather`, in slot order as `unpermute_sum` does
    (`combine_method` picks by device).
    """
    tok_A = routing.order_A // top_k
    if combine_method(x_TD.device, method) == "index_add" or not x_TD.requires_grad:
        return x_TD.index_select(0, tok_A)
    return _PermuteGatherBackward.apply(x_TD, tok_A, slot_rows(routing, x_TD.shape[0] * top_k), top_k)


def slot_weights(weights_TK: Tensor, routing: Routing) -> Tensor:
    """Routing weight of each row in expert order (A,)."""
    return weights_TK.reshape(-1).index_select(0, routing.order_A)


COMBINES = ("auto", "index_add", "gather")


def combine_method(device: torch.device, method: str = "auto") -> str:
    """`auto`: `index_add` on CPU (it walks the index in order there, so it is deterministic, and it
    writes no S×D copy), `gather` elsewhere (CUDA's `index_add` accumulates with atomics: its bf16
    sums change from run to run)."""
    if method not in COMBINES:
        raise ValueError(f"unknown combine {method!r}; choose one of {list(COMBINES)}")
    if method != "auto":
        return method
    return "index_add" if device.type == "cpu" else "gather"


def slot_rows(routing: Routing, n_slots: int) -> Tensor:
    """For each (token, slot) s = t·K + k, the row of the expert-ordered outputs that holds it, or
    A (one past the last row) for an assignment dropped by capacity: the inverse of `order_A`."""
    n_kept = routing.order_A.numel()
    row_S = torch.full((n_slots,), n_kept, dtype=torch.long, device=routing.order_A.device)
    return row_S.scatter_(0, routing.order_A, torch.arange(n_kept, device=row_S.device))


def unpermute_sum(y_AD: Tensor, routing: Routing, T: int, top_k: int, method: str = "auto") -> Tensor:
    """Sum (already weighted) expert outputs into their tokens' rows: out[t] = Σ_{a: tok(a)=t} y[a].

    `index_add`: out-of-place `index_add`, whose backward w.r.t. `y_AD` is the gather grad[tok_A].
    `gather`: every token's K rows gathered back into slot order (a dropped slot reads a zero row)
    and summed over k in slot order: the same sum in a fixed order, so bitwise the same on every
    run on any device, and no atomics (the gather's backward writes each row once). `auto` picks by
    device (`combine_method`).
    """
    if combine_method(y_AD.device, method) == "index_add":
        return y_AD.new_zeros(T, y_AD.shape[1]).index_add(0, routing.order_A // top_k, y_AD)
    row_S = slot_rows(routing, T * top_k)
    if routing.order_A.numel() < T * top_k:  # capacity dropped some: they read an appended zero row
        y_AD = torch.cat([y_AD, y_AD.new_zeros(1, y_AD.shape[1])])
    return y_AD[row_S].view(T, top_k, y_AD.shape[1]).sum(1)


def unpermute_combine(y_AD: Tensor, routing: Routing, weights_TK: Tensor) -> Tensor:
    """Unweighted expert outputs back in (token, slot) order, summed with the routing weights."""
    T, K = weights_TK.shape
    scale_A = slot_weights(weights_TK, routing).to(y_AD.dtype)
    return unpermute_sum(y_AD * scale_A[:, None], routing, T, K)


def expert_swiglu(
    x_AD: Tensor,
    w1_EFD: Tensor,
    w3_EFD: Tensor,
    w2_EDF: Tensor,
    counts_E: Tensor,
    backend: str = "auto",
    gmm: GroupedMM = grouped_mm,
    scale_A: Tensor | None = None,
) -> Tensor:
    """SwiGLU of every expert on its block of rows: w2 · (s ⊙ silu(w1·x) ⊙ w3·x) (Shazeer 2020).

    `scale_A` (optional) is each row's routing weight s, applied to the hidden activation. w1 and
    w3 run as one grouped GEMM on their concatenation (E, 2F, D): one pass over x with twice the
    output width, and one fused input-gradient GEMM in the backward; the concatenation is a copy
    of the weights, small next to the GEMMs. `gmm` is the grouped GEMM to use (same signature as
    `grouped_mm`), the seam precision code wraps.
    """
    h13_A2F = gmm(x_AD, torch.cat([w1_EFD, w3_EFD], dim=1), counts_E, backend)
    h1_AF, h3_AF = h13_A2F.chunk(2, dim=-1)  # chunk's backward concatenates; slicing would zero-fill
    h_AF = F.silu(h1_AF) * h3_AF
    if scale_A is not None:
        h_AF = h_AF * scale_A.to(h_AF.dtype)[:, None]
    return gmm(h_AF, w2_EDF, counts_E, backend)


# The fixed rules, used where the path is not measured (busy machine, no gradients, autocast,
# `MOELAB_EXPERT_PATH=rules`): mean rows per expert × d_model × expert width (multiply-adds of one
# expert GEMM) above which `auto` fuses on CPU. Set on an AMD Zen 5, where below it the fused
# path's ~25 small ops per expert cost about what they save (0.95–1.01× at 1M; 2²² misjudged 1 of 9
# shapes of benchmarks/expert_fusion.py, 2²¹ none); other machines differ, hence the measurement.
FUSE_MIN_EXPERT_MACS = 1 << 21


def expert_path(backend: str, x_TD: Tensor, n_assignments: int, w1_EFD: Tensor, gmm: GroupedMM) -> str:
    """How the routed path runs: `loop` (unfused); `fused` (per expert, `shared.kernels.fused_experts`,
    the experts one after another); `fused-concurrent` (the same, one single-threaded group of
    experts per core); or `fused-rules` (fused, its concurrency left to `shared.kernels.expert_threads`).

    `fused` asks for the fused path. `auto` on CPU fp32 takes the way measured fastest for this
    machine and layer shape (`shared.kernels.expert_path_autotune`), or the fixed rules where it is
    not measured. Fused only with the plain `grouped_mm`: the fused path runs its GEMMs itself, and
    a precision wrapper must see every GEMM.
    """
    if gmm is not grouped_mm:
        return "loop"
    if backend == "fused":
        return "fused-rules"
    if backend != "auto" or x_TD.device.type != "cpu":
        return "loop"
    E, F, D = w1_EFD.shape
    T = x_TD.shape[0]
    K = n_assignments // T if T else 0
    if x_TD.dtype == torch.float32 and w1_EFD.dtype == torch.float32 and 1 <= K <= E and K * T == n_assignments:
        way = PATH_TUNER.way(T, D, F, E, K)
        if way is not None:
            return way
    return "fused-rules" if n_assignments / E * D * F > FUSE_MIN_EXPERT_MACS else "loop"


def runs_fused(backend: str, x_TD: Tensor, n_assignments: int, w1_EFD: Tensor, gmm: GroupedMM) -> bool:
    """Whether the routed path runs fused per expert (see `expert_path`)."""
    return expert_path(backend, x_TD, n_assignments, w1_EFD, gmm) != "loop"


def moe_experts_forward(
    x_TD: Tensor,
    idx_TK: Tensor,
    weights_TK: Tensor,
    w1_EFD: Tensor,
    w3_EFD: Tensor,
    w2_EDF: Tensor,
    backend: str = "auto",
    capacity: int | None = None,
    gmm: GroupedMM = grouped_mm,
    combine: str = "auto",
) -> tuple[Tensor, Routing]:
    """The whole routed-expert path: out[t] = Σ_k weights[t,k] · SwiGLU_{idx[t,k]}(x[t]).

    permute → grouped SwiGLU (weights on the hidden activation) → unpermute and sum, or the same
    fused per expert (`runs_fused`); `combine` is how the unfused path accumulates rows per token
    (`combine_method`). Returns the combined output (T, D) and the routing (kept
    counts per expert, drops).
    """
    T, K = idx_TK.shape
    routing = route_by_expert(idx_TK, w1_EFD.shape[0], capacity)
    path = expert_path(backend, x_TD, idx_TK.numel(), w1_EFD, gmm)
    if path != "loop":
        tok_A = routing.order_A // K
        # the groups are cut in the forward and kept for the backward, so the setting need only
        # hold here; an explicit MOELAB_EXPERT_THREADS still wins over the measured way
        threads = {"fused": "off", "fused-concurrent": str(torch.get_num_threads())}.get(path)
        with use_expert_threads(threads) if threads and not explicit_setting() else contextlib.nullcontext():
            out = fused_routed_experts(x_TD, tok_A, slot_weights(weights_TK, routing), routing.counts_E,
                                       w1_EFD, w3_EFD, w2_EDF)
        return out, routing
    x_AD = permute(x_TD, routing, K, combine)
    y_AD = expert_swiglu(
        x_AD, w1_EFD, w3_EFD, w2_EDF, routing.counts_E, backend, gmm, slot_weights(weights_TK, routing)
    )
    return unpermute_sum(y_AD, routing, T, K, combine), routing
