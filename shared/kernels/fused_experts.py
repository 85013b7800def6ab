"""Routed experts fused per expert: gather → SwiGLU → scatter while one expert's rows sit in cache.

The unfused path (`dispatch.moe_experts_forward` with the `loop` backend) runs each step over all
A = T·K assignments at once: it gathers an A×D copy of the tokens, writes A×2F hidden
activations, applies SiLU, the gate product and the routing weight as separate passes over A×F
tensors, and scatters an A×D output. On a CPU those passes stream through main memory, and at
the benchmark shape (4096 tokens, top-8, d 512) they cost as much as a fifth of the GEMM time.

Here every step runs on one expert's block of rows (a few hundred rows: well inside L2), so the
elementwise work reads what the GEMM just wrote, and no A×D tensor exists: the forward gathers
each expert's tokens straight from x and accumulates its output straight into the T-row result;
the backward does the same for the output gradient and the input gradient. What it keeps for the
backward is the two hidden pre-activations h1 = x·w1ᵀ and h3 = x·w3ᵀ (A×F each, per expert).

The arithmetic is that of the unfused path (same products, same SiLU, the routing weight on the
hidden activation, `index_add_` in assignment order), so runs stay bitwise reproducible on CPU;
outputs and gradients agree with the naive per-token reference to 1e-5 (tests/shared/kernels).
Its GEMMs go through `shared.kernels.cpu_gemm`, each on the library measured fastest for its shape
class on the machine it runs on (MKL or oneDNN: which wins depends on the CPU, docs/moe.md); every
call site says which size varies with the routing (`vary`), so oneDNN is judged with a new
primitive per row count, as it runs here. Weight gradients are written by the GEMM straight into their expert's slice, and the input
gradient's second GEMM accumulates into the first's result (no copies, no addition pass).
One host sync reads the per-expert counts, as in the `loop` backend. It does not go through the
`gmm` seam, so precision wrappers (bf16/fp8/nvfp4 emulation, transformer-engine) use the unfused
path.
"""

from __future__ import annotations

import functools
import itertools

import torch
import torch.nn.functional as F
from torch import Tensor

from shared.kernels.cpu_gemm import addmm_nt_, mm_nt
from shared.kernels.expert_threads import expert_groups, run_concurrently, split_by_rows


def _forward_experts(experts: range, ctx, x_TD: Tensor, w1_EFD: Tensor, w3_EFD: Tensor, w2_EDF: Tensor,
                     out_TD: Tensor) -> None:
    """Forward of `experts`, accumulated into out_TD; their h1 and h3 kept in ctx for the backward."""
    for e in experts:
        if not ctx.counts[e]:
            continue
        tok, s = ctx.tok[e], ctx.s[e]
        x_cD = x_TD.index_select(0, tok)
        h1, h3 = mm_nt(x_cD, w1_EFD[e], "m"), mm_nt(x_cD, w3_EFD[e], "m")
        h = F.silu(h1).mul_(h3).mul_(s)
        out_TD.index_add_(0, tok, mm_nt(h, w2_EDF[e], "m"))
        ctx.h1s[e], ctx.h3s[e] = h1, h3


def _backward_experts(experts: range, ctx, saved: tuple[Tensor, ...], dout_TD: Tensor, dx_TD: Tensor | None,
                      ds_A: Tensor | None, dw1: Tensor, dw3: Tensor, dw2: Tensor) -> None:
    """Backward of `experts`: their slices of the weight and routing-weight gradients, and their
    input gradient accumulated into dx_TD.

    `saved` is ctx.saved_tensors unpacked once by the caller: under non-reentrant activation
    checkpointing each saved tensor may be unpacked only once per backward, and there is one job
    per expert group."""
    x_TD, _, _, w1_EFD, w3_EFD, w2_EDF = saved
    for e in experts:
        if not ctx.counts[e]:
            for dw in (dw1, dw3, dw2):
                dw[e].zero_()
            continue
        tok, s, h1, h3 = ctx.tok[e], ctx.s[e], ctx.h1s[e], ctx.h3s[e]
        dy_cD = dout_TD.index_select(0, tok)
        a = F.silu(h1)
        g = a * h3  # SwiGLU before the routing weight
        mm_nt(dy_cD.t(), (g * s).t(), "k", out=dw2[e])
        dh = mm_nt(dy_cD, w2_EDF[e].t(), "m")
        if ds_A is not None:
            ds_A[ctx.starts[e]:ctx.starts[e] + ctx.counts[e]] = torch.linalg.vecdot(dh, g)
        dg = dh.mul_(s)
        dh3 = dg * a
        dh1 = torch.ops.aten.silu_backward(dg.mul_(h3), h1)
        x_cD = x_TD.index_select(0, tok)
        mm_nt(dh1.t(), x_cD.t(), "k", out=dw1[e])
        mm_nt(dh3.t(), x_cD.t(), "k", out=dw3[e])
        if dx_TD is not None:
            dx_TD.index_add_(0, tok, addmm_nt_(mm_nt(dh1, w1_EFD[e].t(), "m"), dh3, w3_EFD[e].t(), "m"))


def _groups(counts: list[int], w1_EFD: Tensor) -> list[range]:
    E, F_, D = w1_EFD.shape
    active = sum(1 for c in counts if c)
    mean_macs = sum(counts) / max(active, 1) * D * F_
    return split_by_rows(counts, expert_groups(mean_macs, active))


def _run_groups(groups: list[range], job, accumulator: Tensor | None) -> None:
    """`job(experts, acc)` per group, concurrently; group 0 accumulates into `accumulator`, the
    others into zeroed copies that are added to it in group order."""
    accs = [accumulator] + [None if accumulator is None else torch.zeros_like(accumulator) for _ in groups[1:]]
    run_concurrently([functools.partial(job, experts, acc) for experts, acc in zip(groups, accs, strict=True)])
    for acc in accs[1:]:
        if acc is not None:
            accumulator.add_(acc)


class _FusedRoutedExperts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_TD, tok_A, s_A, counts_E, w1_EFD, w3_EFD, w2_EDF):
        counts = counts_E.tolist()
        ctx.counts, ctx.starts = counts, list(itertools.accumulate(counts, initial=0))[:-1]
        # Per-expert views, cut once: tokens, routing weights (in the activations' dtype: fp32
        # weights with bf16 activations compute in theirs), and the h1/h3 kept for the backward.
        ctx.tok = tok_A.split(counts)
        ctx.s = s_A.to(x_TD.dtype).unsqueeze(1).split(counts)
        ctx.h1s, ctx.h3s = [None] * len(counts), [None] * len(counts)
        ctx.groups = _groups(counts, w1_EFD)
        out_TD = x_TD.new_zeros(x_TD.shape)
        _run_groups(ctx.groups, lambda experts, out: _forward_experts(experts, ctx, x_TD, w1_EFD, w3_EFD, w2_EDF, out),
                    out_TD)
        ctx.save_for_backward(x_TD, tok_A, s_A, w1_EFD, w3_EFD, w2_EDF)
        return out_TD

    @staticmethod
    def backward(ctx, dout_TD):
        saved = ctx.saved_tensors
        x_TD, _, s_A, w1_EFD, w3_EFD, w2_EDF = saved
        need_x, _, need_s, _, need_w1, need_w3, need_w2 = ctx.needs_input_grad
        dout_TD = dout_TD.contiguous()
        dx_TD = torch.zeros_like(x_TD) if need_x else None
        ds_A = s_A.new_empty(s_A.shape) if need_s else None
        # Every expert's slice of the weight gradients is written (zeroed if it got no rows).
        dw1, dw3, dw2 = (torch.empty_like(w) for w in (w1_EFD, w3_EFD, w2_EDF))
        _run_groups(ctx.groups, lambda experts, dx: _backward_experts(experts, ctx, saved, dout_TD, dx, ds_A, dw1, dw3, dw2),
                    dx_TD)
        ctx.h1s = ctx.h3s = ctx.tok = ctx.s = None
        return (dx_TD, None, ds_A, None, dw1 if need_w1 else None, dw3 if need_w3 else None,
                dw2 if need_w2 else None)


def fused_routed_experts(
    x_TD: Tensor, tok_A: Tensor, s_A: Tensor, counts_E: Tensor, w1_EFD: Tensor, w3_EFD: Tensor, w2_EDF: Tensor
) -> Tensor:
    """out[t] = Σ_{a: tok_A[a]=t} s_A[a] · w2_e·(silu(w1_e·x_t) ⊙ w3_e·x_t), e the expert owning row a.

    tok_A: token of each assignment in expert order (expert e owns `counts_E[e]` consecutive
    entries); s_A: its routing weight. Differentiable in x_TD, s_A and the three weights.
    """
    return _FusedRoutedExperts.apply(x_TD, tok_A, s_A, counts_E, w1_EFD, w3_EFD, w2_EDF)
