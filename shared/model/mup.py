"""muP (Yang et al. 2022, "Tensor Programs V", arXiv:2203.03466): width-aware init and LR multipliers.

With m = d_model / base_width (m = 1 at the tuned proxy's width), our Adam-style parameterisation:

| parameter            | init std              | LR multiplier | forward multiplier            |
|----------------------|-----------------------|---------------|-------------------------------|
| token embedding      | init_std              | 1             | × embedding_multiplier (10.66)|
| hidden matrices (attention, FFN, router, every expert) | init_std / √m | 1 / m |                 |
| output head          | init_std              | 1             | logits × output_multiplier / m (0.125 / m) |
| vectors and scalars (norm gains, bungee) | as built | 1    |                               |

The 1/m logit multiplier is muP's output rule written as a forward multiplier (TP5 Table 8
allows moving it there), so the head can keep a width-independent init and LR. The multipliers
10.66 and 0.125 are the Kaiju-style recipe's values at base width. With `mup.enabled: false`
everything is standard parameterisation: multipliers 1, init_std everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from shared.config.model import ModelConfig

EMBEDDING_NAMES = ("tok_embeddings.weight",)
HEAD_NAMES = ("lm_head.weight",)


def width_ratio(cfg: ModelConfig) -> float:
    return cfg.d_model / cfg.mup.base_width if cfg.mup.enabled else 1.0


def embedding_multiplier(cfg: ModelConfig) -> float:
    return cfg.mup.embedding_multiplier if cfg.mup.enabled else 1.0


def logit_multiplier(cfg: ModelConfig) -> float:
    return cfg.mup.output_multiplier / width_ratio(cfg) if cfg.mup.enabled else 1.0


def param_kind(name: str, param: torch.Tensor) -> str:
    """'embedding', 'head', 'matrix' (≥ 2-D hidden weights, experts included) or 'vector'."""
    if name in EMBEDDING_NAMES:
        return "embedding"
    if name in HEAD_NAMES:
        return "head"
    return "matrix" if param.dim() >= 2 else "vector"


def lr_multipliers(model: nn.Module, cfg: ModelConfig) -> dict[str, float]:
    """{parameter name: LR multiplier} per the table above; the optimizer multiplies its LR by it."""
    m = width_ratio(cfg)
    return {name: (1.0 / m if param_kind(name, p) == "matrix" else 1.0) for name, p in model.named_parameters()}


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """Normal init of every ≥ 2-D parameter with the muP std of its kind; vectors keep their init."""
    hidden_std = cfg.init_std / width_ratio(cfg) ** 0.5
    for name, p in model.named_parameters():
        kind = param_kind(name, p)
        if kind in ("embedding", "head"):
            nn.init.normal_(p, std=cfg.init_std)
        elif kind == "matrix":
            nn.init.normal_(p, std=hidden_std)
