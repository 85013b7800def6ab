"""Each attention kind trains inside a mixed pattern ([kind, kind, kind, mla], Kimi-Linear style)
in the full MoETransformer for 50 CPU steps, the loss falls, and the trained model relies on the
kind: zeroing its layers' output afterwards raises the loss.

The falling loss alone cannot tell that the kind works: the MLA layer and the MLPs learn the task
without it (with every `kind` layer returning zeros the loss still falls below half). The
ablation can: a kind that contributed nothing leaves the loss unchanged when it is removed. The
planted test shows the check failing on a zeroed kind."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.config.model import ModelConfig
from shared.model import MoETransformer

KINDS = ["gqa", "swa", "nsa", "kda"]
# Zeroing a kind that learned something moves the loss by tenths of a nat (gqa: 0.29 → 0.90);
# a kind that contributed nothing moves it by exactly zero.
MIN_ABLATION_RISE = 0.05


def _zeros(module, inputs, output):
    return torch.zeros_like(output)


def _train(kind: str, zero_kind: bool) -> tuple[list[float], float]:
    """50 steps on the mixed pattern; the losses, and how much zeroing the kind's layers then raises the loss."""
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
    under_test = [b.attn for b in model.layers[:3]]
    planted = [a.register_forward_hook(_zeros) for a in under_test] if zero_kind else []  # a kind that computes nothing
    # A learnable task that needs attention: each sequence repeats a random 8-token motif.
    g = torch.Generator().manual_seed(1)
    motif = torch.randint(0, 64, (8, 8), generator=g)
    tokens = motif.repeat(1, 5)[:, :40]

    def loss_of() -> tuple[torch.Tensor, dict]:
        logits, aux = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 64), tokens[:, 1:].reshape(-1)), aux

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        loss, aux = loss_of()
        opt.zero_grad()
        (loss + aux["aux_loss"]).backward()
        opt.step()
        model.update_router_biases()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        intact = loss_of()[0].item()
        ablation = [a.register_forward_hook(_zeros) for a in under_test]
        ablated = loss_of()[0].item()
        for hook in ablation + planted:
            hook.remove()
    return losses, ablated - intact


def _trains_and_relies_on_the_kind(losses: list[float], rise: float) -> bool:
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    return all(torch.isfinite(torch.tensor(losses))) and last < 0.5 * first and rise > MIN_ABLATION_RISE


@pytest.mark.parametrize("kind", KINDS)
def test_mixed_pattern_trains_50_steps_with_falling_loss_and_relies_on_the_kind(kind):
    losses, rise = _train(kind, zero_kind=False)
    assert _trains_and_relies_on_the_kind(losses, rise), (kind, losses[:5], losses[-5:], rise)


@pytest.mark.parametrize("kind", [k if k == "gqa" else pytest.param(k, marks=pytest.mark.slow) for k in KINDS])
def test_the_training_check_fails_when_the_kind_under_test_is_zeroed(kind):
    losses, rise = _train(kind, zero_kind=True)
    assert rise == 0.0
    assert not _trains_and_relies_on_the_kind(losses, rise)
