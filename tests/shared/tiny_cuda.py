"""The tiny model trained a few AdamW steps on CUDA in bf16 autocast: the GPU tests' common run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from shared.config import load_config
from shared.model.transformer import MoETransformer

TINY_CUDA = ["model.n_layers=2", "model.vocab_size=256", "model.d_model=128", "model.moe.expert_hidden=128"]


def train_tiny_on_cuda(*overrides: str, steps: int = 20, sdpa=None,
                       after_backward: Callable[[int, torch.Tensor, MoETransformer], None] | None = None,
                       ) -> tuple[list[float], MoETransformer]:
    """Losses of `steps` AdamW steps (lr 3e-3) on one fixed random batch, from the same init for
    every override set; `sdpa` pins an SDPA backend, `after_backward(step, loss, model)` inspects
    each step's gradients before the update."""
    from torch.nn.attention import sdpa_kernel

    cfg = load_config("configs/tiny.yaml", [*TINY_CUDA, *overrides])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 256, (8, 65), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    losses: list[float] = []
    for step in range(steps):
        with sdpa_kernel(sdpa) if sdpa is not None else contextlib.nullcontext():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, aux = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            (loss + aux["aux_loss"]).backward()
        if after_backward is not None:
            after_backward(step, loss, model)
        opt.step()
        losses.append(loss.item())
    return losses, model
