"""Multi-head latent attention (MLA; DeepSeek-V2, arXiv:2405.04434, §2.1; used unchanged in V3).

Why: the KV cache holds one low-rank latent `c_kv` (kv_lora_rank) plus one RoPE key shared by all
heads (qk_rope_head_dim) per token, e.g. (512 + 64) values in V3 against 2·n_kv_heads·head_dim for
GQA, while keeping per-head keys and values. RoPE cannot be applied to keys that are re-expanded
from the latent (it would block absorbing W_UK into the query), hence the *decoupled* RoPE key:
queries and keys are `[nope ; rope]` concatenations, and the softmax scale is
1/sqrt(qk_nope_head_dim + qk_rope_head_dim) — the full query/key width, not v_head_dim or
d_model/n_heads (paper §2.1.3). Both the query (q_lora_rank) and KV latents pass through an
RMSNorm as in the released models (`shared.model.norm.RMSNorm`: fp32, one autograd node). V3's extra `mscale` factor only applies with YaRN context
extension, which this model does not use.

`forward` is the training path (expand keys/values, one causal attention call,
`shared.kernels.causal_attention`; the per-head q, k and v, padded for SDPA where it runs, are assembled in one pass each way by `shared.model.attention.mla_heads`). `forward_absorbed` is the
inference form that attends in latent space (W_UK absorbed into the query, W_UV applied after),
proving the cache really is `c_kv` + `k_rope`; a test checks both against an unfused reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from shared.kernels.causal_attention import blocked_applies, causal_attention, sdpa_pads_values
from shared.kernels.cpu_gemm import Linear
from shared.model.attention.cache import LayerCache, causal_mask, rope_at
from shared.model.attention.mla_heads import mla_heads
from shared.model.attention.registry import register_attention
from shared.model.norm import RMSNorm
from shared.model.rope import RotaryEmbedding

if TYPE_CHECKING:
    from shared.config.model import ModelConfig


def kv_cache_bytes_per_token_mla(kv_lora_rank: int, qk_rope_head_dim: int, bytes_per_value: int = 2) -> int:
    """Bytes per token per layer: the KV latent plus the shared RoPE key."""
    return (kv_lora_rank + qk_rope_head_dim) * bytes_per_value


@register_attention("mla")
class MultiHeadLatentAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        m = cfg.attention.mla
        self.layer_idx = layer_idx
        self.n_heads = cfg.n_heads
        self.q_lora_rank = m.q_lora_rank
        self.kv_lora_rank = m.kv_lora_rank
        self.nope = m.qk_nope_head_dim
        self.rope_dim = m.qk_rope_head_dim
        self.v_dim = m.v_head_dim
        self.qk_dim = self.nope + self.rope_dim
        self.softmax_scale = self.qk_dim**-0.5
        d, H = cfg.d_model, cfg.n_heads
        if self.q_lora_rank > 0:
            self.wq_a = Linear(d, self.q_lora_rank)
            self.q_norm = RMSNorm(self.q_lora_rank, eps=cfg.norm_eps)
            self.wq_b = Linear(self.q_lora_rank, H * self.qk_dim)
        else:
            self.wq = Linear(d, H * self.qk_dim)
        self.wkv_a = Linear(d, self.kv_lora_rank + self.rope_dim)
        self.kv_norm = RMSNorm(self.kv_lora_rank, eps=cfg.norm_eps)
        self.wkv_b = Linear(self.kv_lora_rank, H * (self.nope + self.v_dim))
        self.wo = Linear(H * self.v_dim, d)
        self.rope = RotaryEmbedding(self.rope_dim, cfg.max_seq_len, cfg.rope_theta)

    def query_projection(self, x_BTD: Tensor) -> Tensor:
        """Per-head queries (B, T, H, nope + rope), RoPE not yet applied."""
        B, T, _ = x_BTD.shape
        q = self.wq_b(self.q_norm(self.wq_a(x_BTD))) if self.q_lora_rank > 0 else self.wq(x_BTD)
        return q.view(B, T, self.n_heads, self.qk_dim)

    def latent_projection(self, x_BTD: Tensor) -> tuple[Tensor, Tensor]:
        """Normalised c_kv (B, T, r) and the shared RoPE key (B, T, rope), RoPE not yet applied."""
        c_kv, k_rope = self.wkv_a(x_BTD).split([self.kv_lora_rank, self.rope_dim], dim=-1)
        return self.kv_norm(c_kv), k_rope

    def queries(self, x_BTD: Tensor) -> tuple[Tensor, Tensor]:
        """(q_nope (B,H,T,nope), q_rope (B,H,T,rope)) with RoPE applied to q_rope."""
        q_nope, q_rope = self.query_projection(x_BTD).transpose(1, 2).split([self.nope, self.rope_dim], dim=-1)
        return q_nope, self.rope(q_rope)

    def latents(self, x_BTD: Tensor) -> tuple[Tensor, Tensor]:
        """What the KV cache stores: normalised c_kv (B,T,r) and the shared RoPE key (B,1,T,rope)."""
        c_kv, k_rope = self.latent_projection(x_BTD)
        return c_kv, self.rope(k_rope.unsqueeze(1))

    def forward(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        q_BTHk = self.query_projection(x_BTD)
        c_kv, k_rope_BTr = self.latent_projection(x_BTD)
        kv_BTHm = self.wkv_b(c_kv).view(B, T, self.n_heads, self.nope + self.v_dim)
        # values zero-padded to the query/key width only where SDPA runs a kernel that needs equal
        # widths (flash; `sdpa_pads_values`): CUDA's memory-efficient and cuDNN kernels take them unequal
        pad_v = not blocked_applies(q_BTHk, T, self.v_dim) and sdpa_pads_values(q_BTHk, T, self.v_dim, self.n_heads)
        q, k, v = mla_heads(q_BTHk, kv_BTHm, k_rope_BTr, *self.rope.half_tables(T), self.nope, pad_v)
        o_BHTv = causal_attention(q, k, v, self.softmax_scale)[..., : self.v_dim]
        return self.wo(o_BHTv.transpose(1, 2).reshape(B, T, self.n_heads * self.v_dim))

    def forward_absorbed(self, x_BTD: Tensor) -> Tensor:
        """Latent-space attention (the decode-time form): W_UK folded into q, W_UV applied after."""
        B, T, _ = x_BTD.shape
        q_nope, q_rope = self.queries(x_BTD)
        c_kv, k_rope = self.latents(x_BTD)
        w = self.wkv_b.weight.view(self.n_heads, self.nope + self.v_dim, self.kv_lora_rank)
        w_uk_HNR, w_uv_HVR = w.split([self.nope, self.v_dim], dim=1)
        q_lat_BHTR = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk_HNR)
        scores = torch.einsum("bhtr,bsr->bhts", q_lat_BHTR, c_kv) + q_rope @ k_rope.transpose(-1, -2)
        causal = torch.ones(T, T, dtype=torch.bool, device=x_BTD.device).tril()
        probs = (scores * self.softmax_scale).masked_fill(~causal, float("-inf")).softmax(dim=-1)
        o_lat_BHTR = torch.einsum("bhts,bsr->bhtr", probs, c_kv)
        o_BHTv = torch.einsum("bhtr,hvr->bhtv", o_lat_BHTR, w_uv_HVR)
        return self.wo(o_BHTv.transpose(1, 2).reshape(B, T, self.n_heads * self.v_dim))

    def forward_cached(self, x_BtD: Tensor, cache: LayerCache) -> Tensor:
        """`forward_absorbed` for t new tokens over a cache of the latent `c_kv` and the rotated shared
        RoPE key, the only per-token state MLA needs; appends the new tokens' latents."""
        B, t, _ = x_BtD.shape
        start = cache.length
        q_nope, q_rope = self.query_projection(x_BtD).transpose(1, 2).split([self.nope, self.rope_dim], dim=-1)
        c_kv_new, k_rope_new = self.latent_projection(x_BtD)
        c_kv_BSR = cache.append("c_kv", c_kv_new, seq_dim=1)
        k_rope_B1Sr = cache.append("k_rope", rope_at(self.rope, k_rope_new.unsqueeze(1), start), seq_dim=2)
        w = self.wkv_b.weight.view(self.n_heads, self.nope + self.v_dim, self.kv_lora_rank)
        w_uk_HNR, w_uv_HVR = w.split([self.nope, self.v_dim], dim=1)
        q_lat_BHtR = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk_HNR)
        scores = torch.einsum("bhtr,bsr->bhts", q_lat_BHtR, c_kv_BSR)
        scores = scores + rope_at(self.rope, q_rope, start) @ k_rope_B1Sr.transpose(-1, -2)
        mask = causal_mask(t, start, x_BtD.device)
        probs = (scores * self.softmax_scale).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o_BHtv = torch.einsum("bhtr,hvr->bhtv", torch.einsum("bhts,bsr->bhtr", probs, c_kv_BSR), w_uv_HVR)
        return self.wo(o_BHtv.transpose(1, 2).reshape(B, t, self.n_heads * self.v_dim))

    def kv_cache_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        return kv_cache_bytes_per_token_mla(self.kv_lora_rank, self.rope_dim, bytes_per_value)
