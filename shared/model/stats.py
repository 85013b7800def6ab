"""Router statistics for one MoE layer, as detached tensors (no host sync in the forward).

MaxVio (DeepSeek-V3 / Wang et al. 2024, arXiv:2408.15664): (max_i load_i − mean load) / mean load,
0 for perfect balance. Router entropy: mean over tokens of the entropy (nats) of the scores
normalised over experts; log(E) is the uniform maximum. Dead experts: those given no token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared.model.balance import normalized_scores


def max_violation(load_E: Tensor) -> Tensor:
    load = load_E.float()
    mean = load.mean()
    return (load.max() - mean) / mean.clamp_min(1e-20)


def router_entropy(scores_TE: Tensor) -> Tensor:
    p = normalized_scores(scores_TE.float())
    return -(p * torch.log(p.clamp_min(1e-20))).sum(-1).mean()


def router_stats(load_E: Tensor, scores_TE: Tensor, bias_E: Tensor, losses: dict[str, Tensor], dropped: Tensor) -> dict[str, Tensor]:
    """Everything a dashboard needs about one layer's routing in one step."""
    with torch.no_grad():
        stats = {
            "tokens_per_expert": load_E.detach(),
            "max_vio": max_violation(load_E),
            "router_entropy": router_entropy(scores_TE.detach()),
            "dead_experts": (load_E == 0).sum(),
            "bias_min": bias_E.min(),
            "bias_max": bias_E.max(),
            "bias_mean": bias_E.mean(),
            "dropped_tokens": dropped.detach(),
        }
    stats.update({name: loss.detach() for name, loss in losses.items()})
    return stats


def step_stats(load_E: Tensor, scores_TE: Tensor, dropped: Tensor) -> dict[str, Tensor]:
    """What a trainer reads from every step's forward, logged or not: the loads (bias update, MaxVio
    and dead experts of the whole batch), the router entropy (the health watch's collapse rule
    counts consecutive steps) and the drops. The rest of `router_stats` is for logged steps."""
    with torch.no_grad():
        return {"tokens_per_expert": load_E.detach(), "router_entropy": router_entropy(scores_TE.detach()),
                "dropped_tokens": dropped.detach()}


def summarize(aux: dict) -> dict[str, float]:
    """Flatten `aux["layers"]` to {"layer3/max_vio": 0.12, ...} scalars for logging (this syncs)."""
    out: dict[str, float] = {"aux_loss": float(aux["aux_loss"].detach())}
    for layer, stats in aux["layers"].items():
        for name, value in stats.items():
            if value.numel() == 1:
                out[f"layer{layer}/{name}"] = float(value)
    return out
