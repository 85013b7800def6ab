"""Attention registry: a layer's attention kind (a config string) -> the class that builds it.

Why a registry: researchers swap attention per layer (`model.attention.pattern: [kda, kda, kda, mla]`,
the Kimi-Linear hybrid), so adding a variant must be one new file plus one `@register_attention`
line, with nothing else in the model changing. Every registered class takes `(cfg: ModelConfig,
layer_idx: int)` and its module maps `x_BTD -> y_BTD` as causal self-attention, applying RoPE
itself where it uses positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from shared.config.model import ModelConfig

AttentionFactory = Callable[["ModelConfig", int], nn.Module]

ATTENTION_REGISTRY: dict[str, AttentionFactory] = {}


def register_attention(name: str) -> Callable[[AttentionFactory], AttentionFactory]:
    """Class decorator: make `name` a valid value in `model.attention.pattern`."""

    def deco(factory: AttentionFactory) -> AttentionFactory:
        if name in ATTENTION_REGISTRY:
            raise ValueError(f"attention kind {name!r} is registered twice")
        ATTENTION_REGISTRY[name] = factory
        return factory

    return deco


def build_attention(cfg: ModelConfig, layer_idx: int) -> nn.Module:
    """The attention module for layer `layer_idx`: kind = `cfg.attention_kind(layer_idx)`."""
    kind = cfg.attention_kind(layer_idx)
    try:
        factory = ATTENTION_REGISTRY[kind]
    except KeyError:
        raise ValueError(
            f"model.attention.pattern names {kind!r} (layer {layer_idx}) but no attention is registered under it; "
            f"registered: {sorted(ATTENTION_REGISTRY)}"
        ) from None
    return factory(cfg, layer_idx)
