"""MLA's per-head queries, keys and padded values for the attention kernel, built in one pass each way.

Why: written as tensor ops, MLA's training path splits the query projection into its no-RoPE and
RoPE channels, rotates the latter, and concatenates them back; splits the expanded latent into
per-head keys and values; broadcasts the shared RoPE key over heads and concatenates it on; and
zero-pads the values to the query/key width (PyTorch's flash kernels need equal widths). Each
concatenation writes the whole tensor again, and each split's backward concatenates its pieces'
gradients — on a 2-core CPU at the train-step benchmark's shape those concatenations were 26
calls and about 3% of the step. Here one autograd node reads the two projections once and writes
q, k and the padded v once; its backward writes the two projections' gradients once, the RoPE
part rotated back by −θ and the shared key's gradient summed over heads. It computes exactly what
the tensor-op form computes (`mla_heads_reference`, which a test compares it with) and keeps no
activation: the backward needs only the RoPE tables.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared.model.rope import apply_rope_half, rotate_into


def mla_heads_reference(q_BTHk: Tensor, kv_BTHm: Tensor, k_rope_BTr: Tensor, cos_Th: Tensor, sin_Th: Tensor,
                        nope: int, pad_v: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """The tensor-op form: q and k (B, H, T, nope + rope), v (B, H, T, v width), padded to the q/k
    width if `pad_v`."""
    q = q_BTHk.transpose(1, 2)
    q_nope, q_rope = q.split([nope, q.shape[-1] - nope], dim=-1)
    q = torch.cat([q_nope, apply_rope_half(q_rope, cos_Th, sin_Th)], dim=-1)
    kv = kv_BTHm.transpose(1, 2)
    k_nope, v = kv.split([nope, kv.shape[-1] - nope], dim=-1)
    k_rope = apply_rope_half(k_rope_BTr.unsqueeze(1), cos_Th, sin_Th)
    k = torch.cat([k_nope, k_rope.expand(-1, q.shape[1], -1, -1)], dim=-1)
    if pad_v:
        v = torch.nn.functional.pad(v, (0, max(0, q.shape[-1] - v.shape[-1])))
    return q, k, v


class _MLAHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q_BTHk: Tensor, kv_BTHm: Tensor, k_rope_BTr: Tensor, cos_Th: Tensor, sin_Th: Tensor,
                nope: int, pad_v: bool) -> tuple[Tensor, Tensor, Tensor]:
        B, T, H, dk = q_BTHk.shape
        dv = kv_BTHm.shape[-1] - nope
        v_width = max(dk, dv) if pad_v else dv
        ctx.save_for_backward(cos_Th, sin_Th)
        ctx.nope, ctx.dv, ctx.v_width, ctx.qk_shape = nope, dv, v_width, (B, H, T, dk)
        q = q_BTHk.new_empty(B, H, T, dk)
        q[..., :nope].copy_(q_BTHk[..., :nope].transpose(1, 2))
        rotate_into(q[..., nope:], q_BTHk[..., nope:].transpose(1, 2), cos_Th, sin_Th)
        k = q_BTHk.new_empty(B, H, T, dk)
        k[..., :nope].copy_(kv_BTHm[..., :nope].transpose(1, 2))
        k_rope = k_rope_BTr.new_empty(B, 1, T, dk - nope)
        rotate_into(k_rope, k_rope_BTr.unsqueeze(1), cos_Th, sin_Th)
        k[..., nope:].copy_(k_rope.expand(B, H, T, dk - nope))
        v = q_BTHk.new_empty(B, H, T, v_width)
        v[..., :dv].copy_(kv_BTHm[..., nope:].transpose(1, 2))
        v[..., dv:].zero_()
        return q, k, v

    @staticmethod
    def backward(ctx, dq: Tensor | None, dk: Tensor | None, dv_pad: Tensor | None):
        nope, dv = ctx.nope, ctx.dv
        cos_Th, sin_Th = ctx.saved_tensors
        B, H, T, width = ctx.qk_shape
        like = next(t for t in (dq, dk, dv_pad) if t is not None)
        dq = like.new_zeros(B, H, T, width) if dq is None else dq
        dk = like.new_zeros(B, H, T, width) if dk is None else dk
        dv_pad = like.new_zeros(B, H, T, ctx.v_width) if dv_pad is None else dv_pad
        d_q = dq.new_empty(B, T, H, width)
        d_q[..., :nope].copy_(dq[..., :nope].transpose(1, 2))
        rotate_into(d_q[..., nope:].transpose(1, 2), dq[..., nope:], cos_Th, -sin_Th)
        d_kv = dk.new_empty(B, T, H, nope + dv)
        d_kv[..., :nope].copy_(dk[..., :nope].transpose(1, 2))
        d_kv[..., nope:].copy_(dv_pad[..., :dv].transpose(1, 2))
        d_k_rope = dk.new_empty(B, 1, T, width - nope)
        rotate_into(d_k_rope, dk[..., nope:].sum(dim=1, keepdim=True), cos_Th, -sin_Th)
        return d_q, d_kv, d_k_rope.squeeze(1), None, None, None, None


def mla_heads(q_BTHk: Tensor, kv_BTHm: Tensor, k_rope_BTr: Tensor, cos_Th: Tensor, sin_Th: Tensor,
              nope: int, pad_v: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, H, T, nope + rope) from the query projection (B, T, H, nope + rope), RoPE on its last
    channels; k from the expanded latent's first `nope` channels per head and the shared RoPE key
    (B, T, rope), rotated, on every head; v from the latent's remaining channels, zero-padded to
    the q/k width if `pad_v` (for SDPA's fused kernels; the blocked CPU kernel takes any width). `cos_Th`/`sin_Th` are the RoPE tables' first halves cut to T. Under
    `torch.compile` the tensor-op form runs (the compiler fuses it, and cannot trace the writes
    into views)."""
    if torch.compiler.is_compiling():
        return mla_heads_reference(q_BTHk, kv_BTHm, k_rope_BTr, cos_Th, sin_Th, nope, pad_v)
    return _MLAHeads.apply(q_BTHk, kv_BTHm, k_rope_BTr, cos_Th, sin_Th, nope, pad_v)
