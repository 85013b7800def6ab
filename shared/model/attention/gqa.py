"""Grouped-query attention (GQA; Ainslie et al. 2023, arXiv:2305.13245), the baseline.

`n_kv_heads` key/value heads are shared by groups of `n_heads / n_kv_heads` query heads, which cuts
the KV cache by that factor; `n_kv_heads == n_heads` is plain multi-head attention. The kernel is
PyTorch's `scaled_dot_product_attention` (flash / memory-efficient / math backend chosen by torch),
with `enable_gqa` so the shared KV heads are never materialised per query head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.nn.functional as F
from torch import Tensor, nn

from shared.kernels.cpu_gemm import Linear
from shared.model.attention.cache import LayerCache, causal_mask, rope_at
from shared.model.attention.registry import register_attention
from shared.model.rope import RotaryEmbedding

if TYPE_CHECKING:
    from shared.config.model import ModelConfig


def kv_cache_bytes_per_token_gqa(n_kv_heads: int, head_dim: int, bytes_per_value: int = 2) -> int:
    """KV-cache bytes per token per layer: K and V for every KV head (bf16 = 2 bytes)."""
    return 2 * n_kv_heads * head_dim * bytes_per_value


@register_attention("gqa")
class GroupedQueryAttention(nn.Module):
    """Causal GQA with RoPE on queries and keys."""

    def __init__(self, cfg: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.resolved_head_dim
        d = cfg.d_model
        self.wq = Linear(d, self.n_heads * self.head_dim)
        self.wk = Linear(d, self.n_kv_heads * self.head_dim)
        self.wv = Linear(d, self.n_kv_heads * self.head_dim)
        self.wo = Linear(self.n_heads * self.head_dim, d)
        self.rope = RotaryEmbedding(self.head_dim, cfg.max_seq_len, cfg.rope_theta)

    def project_qkv(self, x_BTD: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries (B, H, T, d) and keys/values (B, Hkv, T, d), RoPE applied to q and k."""
        B, T, _ = x_BTD.shape
        q_BHTd = self.wq(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k_BKTd = self.wk(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v_BKTd = self.wv(x_BTD).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return self.rope(q_BHTd), self.rope(k_BKTd), v_BKTd

    def forward(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        q, k, v = self.project_qkv(x_BTD)
        o_BHTd = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(o_BHTd.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    def forward_cached(self, x_BtD: Tensor, cache: LayerCache) -> Tensor:
        """Attention of t new tokens to the cached ones and to each other; appends their keys/values."""
        B, t, _ = x_BtD.shape
        start = cache.length
        q = self.wq(x_BtD).view(B, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x_BtD).view(B, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x_BtD).view(B, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        k_BKSd = cache.append("k", rope_at(self.rope, k, start), seq_dim=2)
        v_BKSd = cache.append("v", v, seq_dim=2)
        o_BHtd = F.scaled_dot_product_attention(rope_at(self.rope, q, start), k_BKSd, v_BKSd,
                                                attn_mask=causal_mask(t, start, x_BtD.device),
                                                enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(o_BHtd.transpose(1, 2).reshape(B, t, self.n_heads * self.head_dim))

    def kv_cache_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        return kv_cache_bytes_per_token_gqa(self.n_kv_heads, self.head_dim, bytes_per_value)
