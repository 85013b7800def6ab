"""Each attention kind trains inside a mixed pattern ([kind, kind, kind, mla], Kimi-Linear style)
in the full MoETransformer for 50 CPU steps, and the loss falls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.config.model import ModelConfig
from shared.model import MoETransformer


@pytest.mark.parametrize("kind", ["gqa", "swa", "nsa", "kda"])
def test_mixed_pattern_trains_50_steps_with_falling_loss(kind):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=64, first_k_dense=1)
    cfg.moe.n_routed_experts, cfg.moe.expert_hidden = 4, 32
    cfg.attention.pattern = [kind, kind, kind, "mla"]
    cfg.attention.swa.window = 8
    cfg.attention.nsa.block_size, cfg.attention.nsa.n_selected, cfg.attention.nsa.window = 8, 2, 8
    cfg.attention.kda.chunk_size = 16
    model = MoETransformer(cfg)
    kinds = [type(b.attn).__name__ for b in model.layers]
    assert kinds[3] == "MultiHeadLatentAttention" and len(set(kinds)) == 2
    # A learnable task that needs attention: each sequence repeats a random 8-token motif.
    g = torch.Generator().manual_seed(1)
    motif = torch.randint(0, 64, (8, 8), generator=g)
    tokens = motif.repeat(1, 5)[:, :40]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        (loss + aux["aux_loss"]).backward()
        opt.step()
        model.update_router_biases()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first, (kind, losses[:5], losses[-5:])
