"""Native Sparse Attention (NSA; Yuan et al. 2025, arXiv:2502.11089, §3).

Why: each query reads a compressed summary of the whole past, the few past blocks that summary
ranks highest, and a local window; learned gates mix the three. Three branches, each with its own
keys and values (the paper's guard against shortcut learning between branches):
- compression: every block of `block_size` keys (values) -> one key (value) through a small MLP φ
  with an intra-block position embedding; a query sees block j once the block is complete
  ((j+1)·l - 1 <= t). Here the compression stride equals the block length (the paper also allows
  overlapping blocks, l=32, d=16) and the selection block equals the compression block (l' = l),
  so the compression scores rank selection blocks directly (the paper's map from compression
  scores to selection blocks is the identity when l' = l = d).
- selection: importance = compression-branch probabilities summed over the heads of a GQA group
  (shared selection per group, paper §3.3.2); the top `n_selected` blocks among those that start at
  or before t, with the first block and the query's own (partial) block always included; the query
  attends causally to the tokens of its selected blocks.
- sliding window: the last `window` tokens.
Output: W_o Σ_c sigmoid(W_g x)_c · o_c, one gate per head per branch.

Two paths compute the same function (tests check outputs and gradients): `reference` builds the
(T, T) selection and window masks and runs SDPA — quadratic, the one to read; `gather` (default)
gathers each query's n·l selected keys by index and runs the window through SWA's blocked kernel,
so besides the compression scores (T × T/l) it is linear in T. Neither is a fused GPU kernel.
With n_selected >= ceil(T / block_size) and window >= T, the selection and window branches are
exactly full causal attention over their own keys/values — the check the tests use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from shared.kernels.cpu_gemm import Linear
from shared.model.attention.registry import register_attention
from shared.model.attention.swa import blocked_window_attention, sliding_window_mask
from shared.model.rope import RotaryEmbedding

if TYPE_CHECKING:
    from shared.config.model import ModelConfig


class BlockCompressor(nn.Module):
    """φ: a block of `block` vectors (+ intra-block position embedding) -> one vector (2-layer MLP)."""

    def __init__(self, block: int, dim: int) -> None:
        super().__init__()
        self.block = block
        self.pos_LD = nn.Parameter(torch.zeros(block, dim))
        self.mlp = nn.Sequential(Linear(block * dim, dim), nn.SiLU(), Linear(dim, dim))

    def forward(self, x_BHTd: Tensor) -> Tensor:
        """(B, H, T, d) -> (B, H, T // block, d); a trailing incomplete block is not compressed."""
        B, H, T, d = x_BHTd.shape
        nb = T // self.block
        blocks = x_BHTd[:, :, : nb * self.block].reshape(B, H, nb, self.block, d) + self.pos_LD
        return self.mlp(blocks.reshape(B, H, nb, self.block * d))


@register_attention("nsa")
class NativeSparseAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int = 0) -> None:
        super().__init__()
        c = cfg.attention.nsa
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.resolved_head_dim
        self.block = c.block_size
        self.n_selected = c.n_selected
        self.window = c.window
        d, H, Hk, hd = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.resolved_head_dim
        self.wq = Linear(d, H * hd)
        self.wkv = Linear(d, 6 * Hk * hd)  # k, v for compression, selection, window
        self.compress_k = BlockCompressor(self.block, hd)
        self.compress_v = BlockCompressor(self.block, hd)
        self.w_gate = nn.Linear(d, 3 * H, bias=True)
        self.wo = Linear(H * hd, d)
        self.rope = RotaryEmbedding(hd, cfg.max_seq_len, cfg.rope_theta)
        self.impl = "gather"  # gather (default, O(T·(n·l + w)) besides compression) | reference

    def _kv_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)

    def _expand(self, x_BKT: Tensor) -> Tensor:
        """KV-head tensor -> one copy per query head of its group."""
        return x_BKT.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)

    def compression(self, q: Tensor, k_cmp: Tensor, v_cmp: Tensor) -> tuple[Tensor, Tensor]:
        """Output (B, H, T, d) and probabilities (B, H, T, nb) over the complete blocks each query sees."""
        B, H, T, d = q.shape
        kc, vc = self._expand(self.compress_k(k_cmp)), self._expand(self.compress_v(v_cmp))
        nb = kc.shape[2]
        t_T1 = torch.arange(T, device=q.device)[:, None]
        visible_TN = (torch.arange(nb, device=q.device)[None, :] + 1) * self.block - 1 <= t_T1
        scores = (q @ kc.transpose(-1, -2)) * d**-0.5
        # Finite fill, not -inf: rows with no complete block yet must not produce NaN (in backward too).
        scores = scores.masked_fill(~visible_TN, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1) * visible_TN.any(dim=-1, keepdim=True)
        return probs @ vc, probs

    def selected_blocks(self, probs_BHTN: Tensor, T: int) -> tuple[Tensor, Tensor]:
        """Top-n block indices (B, Hk, T, n) per query and whether each pick is a real (started) block."""
        B, H, _, nb = probs_BHTN.shape
        n_all = -(-T // self.block)
        imp = probs_BHTN.reshape(B, self.n_kv_heads, H // self.n_kv_heads, T, nb).sum(dim=2)
        imp = F.pad(imp, (0, n_all - nb))  # the trailing partial block has no compressed score
        t = torch.arange(T, device=imp.device)
        j = torch.arange(n_all, device=imp.device)
        started_TN = j[None, :] * self.block <= t[:, None]
        forced_TN = (j[None, :] == 0) | (j[None, :] == (t // self.block)[:, None])
        imp = imp.masked_fill(forced_TN, float("inf")).masked_fill(~started_TN, float("-inf"))
        top_val, top_idx = imp.topk(min(self.n_selected, n_all), dim=-1)
        return top_idx, top_val > float("-inf")

    def selection_mask(self, probs_BHTN: Tensor, T: int) -> Tensor:
        """(B, Hk, T, T) bool: token s is in one of query t's selected blocks and s <= t."""
        top_idx, valid = self.selected_blocks(probs_BHTN, T)
        n_all = -(-T // self.block)
        chosen_BKTN = torch.zeros(*top_idx.shape[:-1], n_all, dtype=torch.bool, device=top_idx.device)
        chosen_BKTN = chosen_BKTN.scatter(-1, top_idx, valid)
        t = torch.arange(T, device=top_idx.device)
        return chosen_BKTN[..., t // self.block] & (t[None, :] <= t[:, None])

    def _selection_gather(self, q: Tensor, k_slc: Tensor, v_slc: Tensor, probs_BHTN: Tensor) -> Tensor:
        """Selection branch from gathered keys: O(T · n_selected · block_size), no (T, T) tensor."""
        B, H, T, d = q.shape
        Hk, rep, blk = self.n_kv_heads, H // self.n_kv_heads, self.block
        top_idx, valid = self.selected_blocks(probs_BHTN, T)
        pos = top_idx.unsqueeze(-1) * blk + torch.arange(blk, device=q.device)  # (B, Hk, T, n, l)
        t = torch.arange(T, device=q.device)[:, None, None]
        ok = (valid.unsqueeze(-1) & (pos <= t)).flatten(-2)
        flat = (torch.arange(B * Hk, device=q.device).view(B, Hk, 1, 1) * T + pos.clamp(max=T - 1).flatten(-2))
        k_sel = k_slc.reshape(B * Hk * T, d)[flat]  # (B, Hk, T, n*l, d)
        v_sel = v_slc.reshape(B * Hk * T, d)[flat]
        scores = torch.einsum("bgrtd,bgtsd->bgrts", q.view(B, Hk, rep, T, d), k_sel) * d**-0.5
        probs = scores.masked_fill(~ok[:, :, None], float("-inf")).softmax(dim=-1)
        return torch.einsum("bgrts,bgtsd->bgrtd", probs, v_sel).reshape(B, H, T, d)

    def branches(self, x_BTD: Tensor) -> dict[str, Tensor]:
        """Every intermediate the tests check: q, per-branch k/v, branch outputs, gates (and, for the
        reference, the selection mask)."""
        B, T, _ = x_BTD.shape
        q = self.rope(self.wq(x_BTD).view(B, T, self.n_heads, self.head_dim).transpose(1, 2))
        k_cmp, v_cmp, k_slc, v_slc, k_win, v_win = (self._kv_heads(t) for t in self.wkv(x_BTD).chunk(6, dim=-1))
        k_cmp, k_slc, k_win = self.rope(k_cmp), self.rope(k_slc), self.rope(k_win)
        o_cmp, probs = self.compression(q, k_cmp, v_cmp)
        out = dict(q=q, k_slc=k_slc, v_slc=v_slc, k_win=k_win, v_win=v_win, k_cmp=k_cmp, v_cmp=v_cmp, o_cmp=o_cmp)
        if self.impl == "reference":
            sel_BKTT = self.selection_mask(probs.detach(), T)
            k_e, v_e = self._expand(k_slc), self._expand(v_slc)
            out["o_slc"] = F.scaled_dot_product_attention(q, k_e, v_e, attn_mask=self._expand(sel_BKTT))
            win_TT = sliding_window_mask(T, self.window, device=x_BTD.device)
            out["o_win"] = F.scaled_dot_product_attention(q, self._expand(k_win), self._expand(v_win), attn_mask=win_TT)
            out["selected"] = sel_BKTT
        else:
            out["o_slc"] = self._selection_gather(q, k_slc, v_slc, probs.detach())
            out["o_win"] = blocked_window_attention(q, k_win, v_win, self.window)
        out["gates"] = torch.sigmoid(self.w_gate(x_BTD)).view(B, T, self.n_heads, 3).permute(0, 2, 3, 1)
        return out

    def combine(self, br: dict[str, Tensor]) -> Tensor:
        g = br["gates"].unsqueeze(-1)
        o_BHTd = g[:, :, 0] * br["o_cmp"] + g[:, :, 1] * br["o_slc"] + g[:, :, 2] * br["o_win"]
        B, H, T, d = o_BHTd.shape
        return self.wo(o_BHTd.transpose(1, 2).reshape(B, T, H * d))

    def forward(self, x_BTD: Tensor) -> Tensor:
        return self.combine(self.branches(x_BTD))
