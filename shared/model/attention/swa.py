"""Sliding-window attention (SWA; Mistral 7B, arXiv:2310.06825) with optional attention sinks.

Each query at position t sees keys s with t - w < s <= t, so cost and KV cache are O(w) per token
instead of O(T). Put `gqa` in the pattern for a global layer every k-th layer
(`pattern: [swa, swa, swa, gqa]`). Projections, GQA sharing and RoPE are exactly GQA's.

Sinks (both optional): `sink_tokens` keeps the first S tokens visible to every query
(StreamingLLM, arXiv:2309.17453); `learned_sinks` adds one learned logit per head to the softmax
denominator that absorbs probability mass without contributing a value (gpt-oss).

Three paths compute the same function:
- `flex` (CUDA): FlexAttention with a block mask, so skipped blocks cost nothing; a learned sink
  rescales the output by sigmoid(lse - sink), which equals adding exp(sink) to the denominator.
  Its compiled kernel needs heads of at least 16 dimensions (`FLEX_MIN_HEAD_DIM`; found on an
  H200), so `auto` uses `blocked` on CUDA below that.
- `blocked` (default elsewhere): queries in blocks of `block`, each attending to its block plus the
  w-1 keys before it, gathered with `unfold` — O(T·(w + block)) time and memory. FlexAttention has
  no backward on CPU (docs/attention.md), so this is the CPU training path.
- `dense`: SDPA with a (T, T) mask; quadratic, kept as the plain reference that tests compare to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from shared.model.attention.gqa import GroupedQueryAttention
from shared.model.attention.registry import register_attention

if TYPE_CHECKING:
    from shared.config.model import ModelConfig

_BLOCK = 64
# the compiled FlexAttention kernel refuses narrower query/key/value heads ("NYI" in inductor)
FLEX_MIN_HEAD_DIM = 16


def sliding_window_mask(T: int, window: int, sink_tokens: int = 0, device=None) -> Tensor:
    """(T, T) bool, True where query t may attend key s: t - window < s <= t, or s < sink_tokens."""
    t = torch.arange(T, device=device)[:, None]
    s = torch.arange(T, device=device)[None, :]
    return (s <= t) & ((t - s < window) | (s < sink_tokens))


def blocked_window_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, sink_tokens: int = 0, sink_logit_H: Tensor | None = None
) -> Tensor:
    """Causal sliding-window attention in O(T·(window + block)) time and memory, any device.

    q (B, H, T, d), k/v (B, Hk, T, d) with Hk dividing H. Queries go in blocks of 64; block i
    attends to its own keys and the window-1 before it, gathered with `unfold`.
    """
    B, H, T, d = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    bs = min(_BLOCK, T)
    n = -(-T // bs)
    P = min(window, T) - 1  # keys before a block that its queries may still see
    pad_right = n * bs - T
    q_BHNbd = F.pad(q, (0, 0, 0, pad_right)).view(B, H, n, bs, d)
    k_pad = F.pad(k, (0, 0, P, pad_right))
    v_pad = F.pad(v, (0, 0, P, pad_right))
    # (B, H, n, d, P+bs) -> (B, H, n, P+bs, d): block i sees absolute keys i*bs-P .. i*bs+bs-1.
    k_win = k_pad.unfold(2, P + bs, bs).transpose(-1, -2)
    v_win = v_pad.unfold(2, P + bs, bs).transpose(-1, -2)
    t_NB1 = (torch.arange(n, device=q.device)[:, None] * bs + torch.arange(bs, device=q.device))[:, :, None]
    s_N1S = (torch.arange(n, device=q.device)[:, None] * bs - P + torch.arange(P + bs, device=q.device))[:, None, :]
    allowed = (s_N1S >= 0) & (s_N1S <= t_NB1) & (t_NB1 - s_N1S < window)
    scores = (q_BHNbd @ k_win.transpose(-1, -2)) * d**-0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    values = v_win
    S = min(sink_tokens, T)
    if S > 0:  # sink keys not already inside the window
        sink_scores = torch.einsum("bhnqd,bhsd->bhnqs", q_BHNbd, k[:, :, :S]) * d**-0.5
        s_S = torch.arange(S, device=q.device)
        sink_ok = (s_S <= t_NB1) & (t_NB1 - s_S >= window)
        scores = torch.cat([scores, sink_scores.masked_fill(~sink_ok, float("-inf"))], dim=-1)
        values = torch.cat([values, v[:, :, None, :S].expand(-1, -1, n, -1, -1)], dim=-2)
    if sink_logit_H is not None:
        sink = sink_logit_H.to(scores.dtype)[None, :, None, None, None].expand(B, H, n, bs, 1)
        scores = torch.cat([scores, sink], dim=-1)
        values = torch.cat([values, values.new_zeros(B, H, n, 1, d)], dim=-2)
    probs = scores.softmax(dim=-1)
    o = probs @ values
    return o.reshape(B, H, n * bs, d)[:, :, :T]


@register_attention("swa")
class SlidingWindowAttention(GroupedQueryAttention):
    def __init__(self, cfg: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__(cfg, layer_idx)
        s = cfg.attention.swa
        self.window = s.window
        self.sink_tokens = s.sink_tokens
        self.sink_logit_H = nn.Parameter(torch.zeros(self.n_heads)) if s.learned_sinks else None
        self.impl = "auto"  # auto | flex | blocked | dense; tests pin one
        self._flex_cache: dict[tuple, object] = {}

    def forward(self, x_BTD: Tensor) -> Tensor:
        B, T, _ = x_BTD.shape
        q, k, v = self.project_qkv(x_BTD)
        impl = self.impl if self.impl != "auto" else auto_impl(x_BTD.is_cuda, self.head_dim)
        if impl == "flex" and x_BTD.is_cuda and self.head_dim < FLEX_MIN_HEAD_DIM:
            raise ValueError(
                f"SWA impl 'flex' needs head_dim >= {FLEX_MIN_HEAD_DIM} on CUDA (compiled FlexAttention), "
                f"got {self.head_dim}; use impl 'auto' or 'blocked'"
            )
        o_BHTd = {"flex": self._flex, "blocked": self._blocked, "dense": self._dense}[impl](q, k, v)
        return self.wo(o_BHTd.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    def _dense(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        T = q.shape[-2]
        allowed_TT = sliding_window_mask(T, self.window, self.sink_tokens, q.device)
        gqa = self.n_kv_heads != self.n_heads
        if self.sink_logit_H is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed_TT, enable_gqa=gqa)
        # Learned sink = one extra key with score `sink_h` and a zero value.
        B, Hk, _, d = k.shape
        k = torch.cat([k, k.new_zeros(B, Hk, 1, d)], dim=2)
        v = torch.cat([v, v.new_zeros(B, Hk, 1, d)], dim=2)
        bias = torch.zeros(T, T, dtype=q.dtype, device=q.device).masked_fill(~allowed_TT, float("-inf"))
        sink_HT1 = self.sink_logit_H.to(q.dtype)[:, None, None].expand(-1, T, 1)
        bias_HTS = torch.cat([bias.expand(self.n_heads, T, T), sink_HT1], dim=-1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias_HTS, enable_gqa=gqa)

    def _blocked(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return blocked_window_attention(q, k, v, self.window, self.sink_tokens, self.sink_logit_H)

    def _flex(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

        T = q.shape[-2]
        key = (T, q.device)
        if key not in self._flex_cache:
            window, sinks = self.window, self.sink_tokens

            def mask_mod(b, h, q_idx, kv_idx):
                return (kv_idx <= q_idx) & ((q_idx - kv_idx < window) | (kv_idx < sinks))

            self._flex_cache[key] = create_block_mask(mask_mod, None, None, T, T, device=q.device)
        gqa = self.n_kv_heads != self.n_heads
        # the log-sum-exp through `return_aux` (`return_lse` is deprecated for removal)
        out, aux = _flex_fn(q.is_cuda)(q, k, v, block_mask=self._flex_cache[key], enable_gqa=gqa,
                                       return_aux=AuxRequest(lse=True))
        lse = aux.lse
        if self.sink_logit_H is None:
            return out
        gate = torch.sigmoid(lse - self.sink_logit_H.to(lse.dtype)[None, :, None])
        return out * gate.unsqueeze(-1).to(out.dtype)


def auto_impl(is_cuda: bool, head_dim: int) -> str:
    """`flex` where its compiled kernel runs (CUDA, heads ≥ 16 wide), else `blocked`."""
    return "flex" if is_cuda and head_dim >= FLEX_MIN_HEAD_DIM else "blocked"


_FLEX = None


def _flex_fn(is_cuda: bool):
    """FlexAttention, compiled once per process on CUDA (uncompiled it materialises the scores).

    Off CUDA the eager version is returned: forward-only (no CPU backward), used by the CPU test
    that checks the block mask and the sink rescaling against the dense path.
    """
    from torch.nn.attention.flex_attention import flex_attention

    if not is_cuda:
        return flex_attention
    global _FLEX
    if _FLEX is None:
        _FLEX = torch.compile(flex_attention, dynamic=False)
    return _FLEX
