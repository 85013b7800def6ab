"""Parameter and FLOP accounting for MFU and for naming recipes ("7B2A" = 7B total, 2B active).

Counts come from the real modules built on the `meta` device (no memory), so whatever attention
variant a layer uses is counted exactly. Active parameters are those one token touches: all
parameters except the routed experts it is not sent to (each MoE layer uses top_k of
n_routed_experts). Embedding parameters count in both total and active.

FLOPs per token for training (Kaplan et al. 2020; PaLM appendix B): 6·N_matmul for forward +
backward of every active matmul (attention projections, FFNs/active experts, router, output head;
not the embedding lookup) plus the attention scores 12·L·H·d_head·T (PaLM's convention, no causal
halving) for sequence length T.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shared.config.model import ModelConfig


@dataclass(frozen=True)
class ParamCounts:
    total: int
    active: int
    embedding: int  # token embedding (+ untied head)
    active_matmul: int  # active parameters used as matmul weights per token (FLOP basis)


def count_params(cfg: ModelConfig) -> ParamCounts:
    from shared.model.transformer import MoETransformer

    with torch.device("meta"):
        model = MoETransformer(cfg)
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for layer in model.moe_layers():
        routed = sum(p.numel() for p in layer.experts.parameters())
        inactive += routed * (cfg.moe.n_routed_experts - cfg.moe.top_k) // cfg.moe.n_routed_experts
    embedding = model.tok_embeddings.weight.numel() + (0 if model.lm_head is None else model.lm_head.weight.numel())
    active = total - inactive
    head = cfg.vocab_size * cfg.d_model
    vectors = sum(p.numel() for p in model.parameters() if p.dim() < 2)
    active_matmul = active - embedding - vectors + head
    return ParamCounts(total=total, active=active, embedding=embedding, active_matmul=active_matmul)


def flops_per_token(cfg: ModelConfig, seq_len: int, counts: ParamCounts | None = None) -> float:
    """Training FLOPs per token: 6·N_active_matmul + 12·L·H·d_head·seq_len."""
    counts = counts or count_params(cfg)
    attention = 12 * cfg.n_layers * cfg.n_heads * cfg.resolved_head_dim * seq_len
    return 6.0 * counts.active_matmul + attention
