"""Kimi Delta Attention (KDA; Kimi Linear, arXiv:2510.26692, §3), a linear-attention layer.

Why: a fixed-size state (K×V per head) instead of a growing KV cache, so time is linear in T and
decode memory is constant; the delta rule (write v_t - prediction, not v_t) plus a decay per key
channel (finer than Gated DeltaNet's one scalar per head) is what lets it match full attention
in the 3:1 KDA:MLA hybrid (`pattern: [kda, kda, kda, mla]`).

Layer, following the paper: q, k, v = SiLU(ShortConv(W x)) (causal depthwise conv, kernel 4);
q, k L2-normalised per head; β = sigmoid(W_β x) per head; log-decay
g = -exp(A_log) · softplus(W_up W_down x + dt_bias) per channel (A_log init log U(1, 16),
dt_bias the inverse softplus of dt ~ logU(1e-3, 0.1), Mamba-style); output
W_o (RMSNorm(o) ⊙ sigmoid(W_up' W_down' x)). No RoPE: position enters through the decay.
Kernels: `kda_ops.kda_chunked` (ours, any device) or flash-linear-attention's `chunk_kda`
on CUDA when installed and `attention.kda.use_fla` is on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from shared.kernels.cpu_gemm import Linear
from shared.model.attention.kda_ops import fla_chunk_kda_available, kda_chunked, kda_fla, kda_recurrent
from shared.model.attention.registry import register_attention
from shared.model.norm import RMSNorm

if TYPE_CHECKING:
    from shared.config.model import ModelConfig


class CausalShortConv(nn.Module):
    """Depthwise 1-D convolution over time that only looks back (left padding of kernel-1)."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, x_BTC: Tensor) -> Tensor:
        x_BCT = F.pad(x_BTC.transpose(1, 2), (self.kernel - 1, 0))
        return self.conv(x_BCT).transpose(1, 2)


@register_attention("kda")
class KimiDeltaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        c = cfg.attention.kda
        self.layer_idx = layer_idx
        self.n_heads = c.n_heads or cfg.n_heads
        self.head_dim = c.head_dim or cfg.resolved_head_dim
        self.chunk_size = c.chunk_size
        self.use_fla = c.use_fla
        self.impl = "auto"  # auto | chunked | recurrent | fla; tests pin one
        d, H, K = cfg.d_model, self.n_heads, self.head_dim
        inner = H * K
        self.wq = Linear(d, inner)
        self.wk = Linear(d, inner)
        self.wv = Linear(d, inner)
        self.conv_q = CausalShortConv(inner, c.conv_size)
        self.conv_k = CausalShortConv(inner, c.conv_size)
        self.conv_v = CausalShortConv(inner, c.conv_size)
        self.w_beta = Linear(d, H)
        self.f_down = Linear(d, c.gate_rank)
        self.f_up = Linear(c.gate_rank, inner)
        self.A_log = nn.Parameter(torch.empty(H).uniform_(1.0, 16.0).log())
        dt = torch.empty(inner).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.g_down = Linear(d, c.gate_rank)
        self.g_up = Linear(c.gate_rank, inner)
        self.o_norm = RMSNorm(K, eps=cfg.norm_eps)  # fp32, one autograd node
        self.wo = Linear(inner, d)

    def _heads(self, x_BTI: Tensor) -> Tensor:
        B, T, _ = x_BTI.shape
        return x_BTI.view(B, T, self.n_heads, -1).transpose(1, 2)

    def recurrence_inputs(self, x_BTD: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """q, k, v, log-decay g (all (B, H, T, K)) and β (B, H, T) for the delta rule."""
        q = self._heads(F.silu(self.conv_q(self.wq(x_BTD))))
        k = self._heads(F.silu(self.conv_k(self.wk(x_BTD))))
        v = self._heads(F.silu(self.conv_v(self.wv(x_BTD))))
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
        f = self._heads(self.f_up(self.f_down(x_BTD)) + self.dt_bias)
        g = -self.A_log.exp()[None, :, None, None] * F.softplus(f.float())
        beta = torch.sigmoid(self.w_beta(x_BTD).float()).transpose(1, 2)
        return q, k, v, g, beta

    def forward(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        q, k, v, g, beta = self.recurrence_inputs(x_BTD)
        scale = self.head_dim**-0.5
        impl = self.impl
        if impl == "auto":
            impl = "fla" if (self.use_fla and x_BTD.is_cuda and fla_chunk_kda_available()) else "chunked"
        if impl == "fla":
            o = kda_fla(q, k, v, g.to(q.dtype), beta.to(q.dtype), scale)
        elif impl == "recurrent":
            o = kda_recurrent(q.float(), k.float(), v.float(), g, beta, scale)
        else:
            o = kda_chunked(q.float(), k.float(), v.float(), g, beta, scale, self.chunk_size)
        o = self.o_norm(o.to(x_BTD.dtype)) * torch.sigmoid(self._heads(self.g_up(self.g_down(x_BTD))))
        return self.wo(o.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    def state_bytes(self, bytes_per_value: int = 4) -> int:
        """Decode-time memory per sequence per layer: one K×V state per head, independent of T."""
        return self.n_heads * self.head_dim * self.head_dim * bytes_per_value
