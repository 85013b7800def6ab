"""Gated delta rule with channel-wise decay (the KDA recurrence) in two exact forms.

Kimi Linear (arXiv:2510.26692, §3), per head with state S ∈ R^{K×V}:
    S_t = (I - β_t k_t k_tᵀ) Diag(α_t) S_{t-1} + β_t k_t v_tᵀ,      o_t = S_tᵀ (scale · q_t)
with α_t = exp(g_t) ∈ (0, 1]^K a decay per key channel (GDN/Mamba2 use one scalar per head).

`kda_recurrent` is the naive token-by-token loop: the reference. `kda_chunked` is the chunked
parallel form used for training (the WY/UT representation of DeltaNet, Yang et al. 2024,
arXiv:2406.06484, with the decay kept per channel). Within a chunk of C tokens, with Γ_r the
cumulative log-decay and S₀ the state entering the chunk, writing S_r = Diag(e^{Γ_r}) S₀ +
Σ_{i≤r} Diag(e^{Γ_r-Γ_i}) k_i u_iᵀ turns the recurrence into a unit lower-triangular system
    (I + StrictLower(β ⊙ A_kk)) U = Diag(β) (V - (K ⊙ e^{Γ}) S₀),   A_kk[r,i] = Σ_c k_rc k_ic e^{Γ_rc-Γ_ic}
and the outputs into O = (Q ⊙ e^{Γ}) S₀ + Lower(A_qk) U. Only the pairwise factors e^{Γ_r-Γ_i}
(i ≤ r, so ≤ 1) are ever exponentiated: no e^{-Γ}, which overflows under the strong decays KDA
learns. Cost is O(T·C·K) for the intra-chunk part and O(T·K·V) for the state: linear in T.
Layout everywhere: q, k (B, H, T, K); v (B, H, T, V); g (B, H, T, K) log-decay ≤ 0; beta (B, H, T).
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F
from torch import Tensor

log = logging.getLogger(__name__)


def kda_recurrent(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float) -> Tensor:
    """Token-by-token reference: O(T) sequential steps, exact by construction."""
    B, H, T, K = q.shape
    S_BHKV = q.new_zeros(B, H, K, v.shape[-1])
    outs = []
    for t in range(T):
        S_BHKV = S_BHKV * g[:, :, t].exp().unsqueeze(-1)
        k_t = k[:, :, t]
        pred_BHV = torch.einsum("bhk,bhkv->bhv", k_t, S_BHKV)
        delta_BHV = beta[:, :, t, None] * (v[:, :, t] - pred_BHV)
        S_BHKV = S_BHKV + k_t.unsqueeze(-1) * delta_BHV.unsqueeze(-2)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t] * scale, S_BHKV))
    return torch.stack(outs, dim=2)


def kda_chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float, chunk_size: int = 64) -> Tensor:
    """Chunked parallel form; equals `kda_recurrent` up to float rounding (tests check 1e-5 in fp32)."""
    B, H, T, K = q.shape
    V = v.shape[-1]
    C = max(1, min(chunk_size, T))
    pad = (-T) % C
    if pad:  # zero keys/values/beta and zero log-decay after the end change nothing before it
        q, k, v, g = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    N = (T + pad) // C
    q_c = q.view(B, H, N, C, K) * scale
    k_c = k.view(B, H, N, C, K)
    v_c = v.view(B, H, N, C, V)
    beta_c = beta.view(B, H, N, C)
    G_c = g.view(B, H, N, C, K).cumsum(dim=-2)

    S = q.new_zeros(B, H, K, V)
    outs = []
    # Intra-chunk work in slabs of chunks: the (C, C, K) pairwise decays of a slab stay cache-sized
    # (one slab for the whole sequence fell out of L3 at T = 4096 and cost a 3.5x step in time).
    slab = max(1, _SLAB_ELEMS // (B * H * C * C * K))
    for n0 in range(0, N, slab):
        sl = slice(n0, min(N, n0 + slab))
        parts = (t[:, :, sl] for t in (q_c, k_c, v_c, beta_c, G_c))
        U0, W, A_qk, q_dec, k_to_end, decay_last = _intra_chunk(*parts)
        for n in range(U0.shape[2]):
            U = U0[:, :, n] - W[:, :, n] @ S
            outs.append(q_dec[:, :, n] @ S + A_qk[:, :, n] @ U)
            S = decay_last[:, :, n] * S + k_to_end[:, :, n].transpose(-1, -2) @ U
    return torch.stack(outs, dim=2).reshape(B, H, N * C, V)[:, :, :T]


_SLAB_ELEMS = 1 << 20


def _intra_chunk(q_c: Tensor, k_c: Tensor, v_c: Tensor, beta_c: Tensor, G_c: Tensor) -> tuple[Tensor, ...]:
    """Per-chunk pieces that do not depend on the incoming state, for a slab of chunks at once.

    Returns U0, W (U = U0 - W S0), A_qk (lower incl. diagonal), q ⊙ e^Γ, k ⊙ e^{Γ_C - Γ} and
    e^{Γ_C} as a (K, 1) column, each with the chunk axis third.
    """
    C, K, V = q_c.shape[-2], q_c.shape[-1], v_c.shape[-1]
    idx = torch.arange(C, device=q_c.device)
    incl = idx[:, None] >= idx[None, :]  # i <= r
    diff = (G_c.unsqueeze(-2) - G_c.unsqueeze(-3)).masked_fill(~incl[:, :, None], float("-inf"))
    k_dec_ric = diff.exp() * k_c.unsqueeze(-3)  # e^{Γ_r - Γ_i} ⊙ k_i, zero above the diagonal
    A_kk = (k_dec_ric @ k_c.unsqueeze(-1)).squeeze(-1).tril(-1)  # [r, i] = Σ_c k_rc k_ic e^{Γ_rc - Γ_ic}
    A_qk = (k_dec_ric @ q_c.unsqueeze(-1)).squeeze(-1)
    M = torch.eye(C, dtype=q_c.dtype, device=q_c.device) + beta_c.unsqueeze(-1) * A_kk
    rhs = torch.cat([beta_c.unsqueeze(-1) * v_c, beta_c.unsqueeze(-1) * (k_c * G_c.exp())], dim=-1)
    # WY form: U = U0 - W S0 for every chunk at once; only the state recursion stays sequential.
    U0, W = torch.linalg.solve_triangular(M, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)
    G_last = G_c[..., -1:, :]
    return U0, W, A_qk, q_c * G_c.exp(), k_c * (G_last - G_c).exp(), G_last.exp().transpose(-1, -2)


@functools.cache
def fla_chunk_kda_available() -> bool:
    """True when flash-linear-attention's Triton KDA kernel can be imported (the `gpu` extra).

    Any failure counts (fla imports Triton and CUDA pieces that fail in more ways than
    ImportError), and the fallback to `kda_chunked` is logged once per process with the reason: a
    GPU run that meant to use fla and silently ran our kernel would be slower for no visible cause."""
    try:
        from fla.ops.kda import chunk_kda  # noqa: F401
    except Exception as exc:
        log.warning("flash-linear-attention's chunk_kda is not usable (%s: %s); KDA runs on kda_chunked",
                    type(exc).__name__, exc)
        return False
    return True


def kda_fla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, scale: float) -> Tensor:
    """flash-linear-attention's `chunk_kda` (CUDA/Triton), same recurrence, our (B, H, T, ·) layout."""
    from fla.ops.kda import chunk_kda

    def bthk(t: Tensor) -> Tensor:
        return t.transpose(1, 2).contiguous()

    o, _ = chunk_kda(bthk(q), bthk(k), bthk(v), bthk(g), beta.transpose(1, 2).contiguous(), scale=scale)
    return o.transpose(1, 2)
