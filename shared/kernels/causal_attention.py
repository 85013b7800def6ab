"""Causal self-attention, with a CPU path for short sequences that materialises the scores a query block at a time.

Why: torch's CPU flash kernel needs equal query/key and value widths, so MLA's narrower values are
zero-padded (32 → 48 at the train-step benchmark's shape) and a third of its P·V work multiplies
zeros; the math fallback it would otherwise take is slower still. At the lengths the CPU runs
(the demo, the tests, the benchmarks: T ≤ 512) the scores fit in cache-sized blocks. Here the
scores of each block of `BLOCK_ROWS` queries against the keys it may see (keys up to the block's last query: the causal triangle is skipped a block at a
time) are one batched GEMM, the mask touches only the block's diagonal square, the softmax runs
in place, and the probabilities are kept for the backward, which is four batched GEMMs per block
and ATen's fused softmax backward. `benchmarks/cpu_attention.py` (forward + backward, 2,048 tokens,
4 heads, q/k 48, v 32; results in benchmarks/results/cpu_attention.*.json), flash over ours: 1.32
at T 256 and 1.59 at T 512 under the AVX2 caps, 1.21 and 1.22 on AVX-512; at T 1024 1.17 and
0.92, while the kept probabilities grow as B·H·T²/2, so above `BLOCKED_MAX_T` flash runs. With
equal widths nothing is padded and the gain was small (1.19 / 1.08 at width 32) and turned into a
loss at width 64 or with shared KV heads (expanded for this path), so `auto` takes the blocked
path only for values narrower than the queries.

`MOELAB_CPU_ATTENTION`: `auto` (default: blocked for CPU fp32 at T ≤ `BLOCKED_MAX_T` when the
values are narrower than the queries), `sdpa` (always `F.scaled_dot_product_attention`) or
`blocked` (always this path on CPU fp32, any T).
Off CPU, in other dtypes and under `torch.compile` it is always SDPA.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch import Tensor

SETTING_ENV = "MOELAB_CPU_ATTENTION"
SETTINGS = ("auto", "sdpa", "blocked")
# 128 query rows per block was the fastest of 64/128/256 at T 256, 512 and 1024 on both ISAs.
BLOCK_ROWS = 128
BLOCKED_MAX_T = 512


def _setting() -> str:
    setting = os.environ.get(SETTING_ENV, "auto")
    if setting not in SETTINGS:
        raise ValueError(f"{SETTING_ENV}={setting!r}; choose one of {list(SETTINGS)}")
    return setting


def blocked_applies(q: Tensor, seq_len: int, v_width: int) -> bool:
    """Whether `causal_attention` takes the blocked-scores path for queries of `q`'s device, dtype
    and width over `seq_len` positions with values `v_width` wide (known before the heads are laid
    out, so MLA pads its values only where SDPA will run)."""
    setting = _setting()
    if setting == "sdpa" or not q.is_cpu or q.dtype is not torch.float32 or torch.compiler.is_compiling():
        return False
    return setting == "blocked" or (v_width < q.shape[-1] and seq_len <= BLOCKED_MAX_T)


# T mod 128 at which the cuDNN attention backend stays unused with unpadded values: a bf16 step at
# T = 64 read memory it did not write (docs/gpu-checks.md), and a public cuDNN SDPA backward bug has
# this shape class; at these lengths the values are padded and the flash kernel runs instead.
CUDNN_SUSPECT_T_MOD_128 = 64


@functools.lru_cache(maxsize=64)
def _sdpa_takes_unequal_widths(device: torch.device, dtype: torch.dtype, heads: int, seq_len: int, qk_width: int,
                               v_width: int) -> bool:
    """Whether a fused CUDA SDPA kernel (memory-efficient or cuDNN) accepts q/k `qk_width` wide with
    values `v_width` wide at this shape; asked of torch once per shape (constant under compile)."""
    from torch.backends.cuda import SDPAParams, can_use_cudnn_attention, can_use_efficient_attention

    q = torch.empty(1, heads, seq_len, qk_width, device=device, dtype=dtype)
    v = torch.empty(1, heads, seq_len, v_width, device=device, dtype=dtype)
    params = SDPAParams(q, q, v, None, 0.0, True, False)
    return bool(can_use_efficient_attention(params, False) or can_use_cudnn_attention(params, False))


def sdpa_pads_values(q: Tensor, seq_len: int, v_width: int, heads: int | None = None) -> bool:
    """Whether values narrower than the queries are zero-padded before SDPA.

    Why: padding 128 → 192 (DeepSeek-V3's MLA widths) spends a third of P·V on zeros, so values go
    unpadded wherever a fused kernel takes unequal widths. On CUDA that is the memory-efficient
    and cuDNN kernels (asked of torch for the shape); flash needs equal widths, and at the cuDNN
    suspect lengths (T ≡ 64 mod 128) the values are padded so flash runs. On CPU they are padded:
    torch's CPU flash kernel needs equal widths and the math kernel that takes unequal ones
    materialises the (T, T) scores (the blocked path above takes any width where it runs)."""
    if v_width >= q.shape[-1]:
        return False
    if q.device.type != "cuda" or seq_len % 128 == CUDNN_SUSPECT_T_MOD_128:
        return True
    heads = heads or q.shape[1]  # q laid out (B, H, T, width) unless `heads` says otherwise
    return not _constant_probe()(q.device, q.dtype, heads, seq_len, q.shape[-1], v_width)


_PROBE = None


def _constant_probe():
    """`_sdpa_takes_unequal_widths` as a constant for torch.compile, wrapped on first use: wrapping
    it at import would import torch._dynamo (and Triton) with this module, before a test or a
    script has set TRITON_INTERPRET."""
    global _PROBE
    if _PROBE is None:
        _PROBE = torch.compiler.assume_constant_result(_sdpa_takes_unequal_widths)
    return _PROBE


@functools.lru_cache(maxsize=64)
def _diagonal_mask(rows: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """(rows, rows) additive mask: −inf above the diagonal (a query may not see later keys)."""
    return torch.full((rows, rows), float("-inf"), dtype=dtype, device=device).triu_(1)


def _blocks(T: int, rows: int) -> list[tuple[int, int]]:
    return [(s, min(s + rows, T)) for s in range(0, T, rows)]


class _BlockedCausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, scale: float, rows: int) -> Tensor:
        B, H, T, dk = q.shape
        dv = v.shape[-1]
        # the scale rides on the (small) queries, not the scores; dK's GEMM reuses the scaled copy
        qs = (q * scale).reshape(B * H, T, dk)
        k3, v3 = k.reshape(B * H, T, dk), v.reshape(B * H, T, dv)
        o = q.new_empty(B * H, T, dv)
        probs = []
        for s, e in _blocks(T, rows):
            p = torch.bmm(qs[:, s:e], k3[:, :e].transpose(1, 2))
            p[:, :, s:e].add_(_diagonal_mask(e - s, q.dtype, q.device))
            torch.ops.aten._softmax.out(p, -1, False, out=p)
            torch.bmm(p, v3[:, :e], out=o[:, s:e])
            probs.append(p)
        ctx.save_for_backward(qs, k3, v3, *probs)
        ctx.scale, ctx.rows, ctx.shape = scale, rows, (B, H, T, dk, dv)
        return o.view(B, H, T, dv)

    @staticmethod
    def backward(ctx, do: Tensor):
        qs, k3, v3, *probs = ctx.saved_tensors
        B, H, T, dk, dv = ctx.shape
        do3 = do.reshape(B * H, T, dv)
        dq, dk3, dv3 = torch.empty_like(qs), torch.empty_like(k3), torch.empty_like(v3)
        # last block first: it sees every key, so it writes dK and dV whole and the others add to them
        for i, (s, e) in reversed(list(enumerate(_blocks(T, ctx.rows)))):
            p = probs[i]
            dp = torch.bmm(do3[:, s:e], v3[:, :e].transpose(1, 2))
            ds = torch._softmax_backward_data(dp, p, -1, p.dtype)
            torch.bmm(ds, k3[:, :e], out=dq[:, s:e])
            if e == T:
                torch.bmm(p.transpose(1, 2), do3[:, s:e], out=dv3)
                torch.bmm(ds.transpose(1, 2), qs[:, s:e], out=dk3)
            else:
                dv3[:, :e].baddbmm_(p.transpose(1, 2), do3[:, s:e])
                dk3[:, :e].baddbmm_(ds.transpose(1, 2), qs[:, s:e])
        dq.mul_(ctx.scale)
        return dq.view(B, H, T, dk), dk3.view(B, H, T, dk), dv3.view(B, H, T, dv), None, None


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """softmax(q·kᵀ·scale + causal mask)·v for q, k (B, H, T, dk) and v (B, H, T, dv); k and v may
    have fewer heads than q (grouped-query attention, a divisor of H). `scale` defaults to dk^-½.

    Equal to `F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)` to float
    rounding; values narrower than the queries are zero-padded where SDPA's fused kernels need
    equal widths (`sdpa_pads_values`) and the padding cut from the output."""
    if q.dim() != 4 or k.shape[:1] + k.shape[2:] != q.shape[:1] + q.shape[2:] or v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"causal_attention expects q, k (B, H, T, dk) and v (B, H, T, dv); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads cannot share {k.shape[1]} key/value heads")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if blocked_applies(q, q.shape[-2], v.shape[-1]):
        if k.shape[1] != q.shape[1]:
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return _BlockedCausalAttention.apply(q, k, v, scale, BLOCK_ROWS)
    dv = v.shape[-1]
    if sdpa_pads_values(q, q.shape[-2], dv):
        v = F.pad(v, (0, q.shape[-1] - dv))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
    return o[..., :dv]
