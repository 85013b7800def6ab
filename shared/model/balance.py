"""Load-balancing: DeepSeek-V3's aux-loss-free bias update and the auxiliary losses we compare it to.

- Bias update (DeepSeek-V3, arXiv:2412.19437 §2.1.2): a per-expert bias is added to the routing
  scores for top-k *selection only*; after each optimizer step `b_i += γ·sign(mean_load − load_i)`
  (γ = 1e-3 for most of their training), so overloaded experts become less likely to be picked.
- Sequence-wise aux loss (DeepSeek-V3 eq. 17–20): per sequence, f_i = E/(K·T)·#{t: i ∈ topk(t)},
  P_i = mean_t s'_{i,t} with s' the scores normalised over all experts; L = α·Σ_i f_i·P_i
  (α = 1e-4), averaged over sequences. Equals α when routing is perfectly even.
- Switch loss (Fedus et al. 2021, eq. 4): α·E·Σ_i f_i·P_i over the whole batch, f_i the fraction
  of assignments to i, P_i the mean router probability.
- Router z-loss (Zoph et al. 2022, ST-MoE eq. 5): mean_t (log Σ_i exp(logit_{t,i}))².
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared.kernels.histogram import expert_histogram


def normalized_scores(scores_TE: Tensor) -> Tensor:
    """Scores as a distribution over experts (softmax scores already are; sigmoid ones are rescaled)."""
    return scores_TE / scores_TE.sum(-1, keepdim=True).clamp_min(1e-20)


def seq_aux_loss(scores_BTE: Tensor, idx_BTK: Tensor, n_experts: int) -> Tensor:
    """DeepSeek-V3's sequence-wise balance loss Σ_i f_i P_i, mean over sequences (α applied by the caller)."""
    B, T, K = idx_BTK.shape
    onehot_BE = torch.zeros(B, n_experts, device=idx_BTK.device, dtype=scores_BTE.dtype)
    onehot_BE.scatter_add_(1, idx_BTK.reshape(B, T * K), torch.ones(B, T * K, device=idx_BTK.device, dtype=scores_BTE.dtype))
    f_BE = onehot_BE * (n_experts / (K * T))
    P_BE = normalized_scores(scores_BTE).mean(1)
    return (f_BE * P_BE).sum(-1).mean()


def switch_aux_loss(scores_TE: Tensor, idx_TK: Tensor, n_experts: int) -> Tensor:
    """Switch Transformer's balance loss E·Σ_i f_i P_i (α applied by the caller)."""
    counts_E = expert_histogram(idx_TK, n_experts).to(scores_TE.dtype)
    f_E = counts_E / idx_TK.numel()
    P_E = normalized_scores(scores_TE).mean(0)
    return n_experts * (f_E * P_E).sum()


def router_z_loss(logits_TE: Tensor) -> Tensor:
    """ST-MoE router z-loss: mean squared log-partition of the router logits."""
    return torch.logsumexp(logits_TE, dim=-1).pow(2).mean()


@torch.no_grad()
def bias_update_(bias_E: Tensor, load_E: Tensor, rate: float, rule: str = "sign") -> None:
    """In place: b_i += γ·sign(mean − load_i) (rule "sign", DeepSeek-V3) or γ·(mean − load_i)/mean
    (rule "error": the step follows the relative load error, so a flooded expert is pushed back
    in a few steps and a balanced router is left alone instead of jittering by ±γ).
    No-op when γ = 0 or no token was routed."""
    if rate == 0.0:
        return
    load = load_E.to(bias_E.dtype)
    mean = load.mean()
    if rule == "sign":
        step = torch.sign(mean - load) * rate
    elif rule == "error":
        step = (mean - load) / mean.clamp_min(1e-20) * rate
    else:
        raise ValueError(f"unknown bias update rule {rule!r}; use sign or error")
    bias_E.add_(torch.where(load.sum() > 0, step, torch.zeros_like(step)))
