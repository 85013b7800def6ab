"""Pluggable causal self-attention, chosen per layer by `model.attention.pattern`.

Each variant is one file registering itself with `@register_attention(kind)`; importing this
package imports them all, so `build_attention(cfg, layer_idx)` can build any of them.
"""

from shared.model.attention import gqa, kda, mla, nsa, swa  # noqa: F401  (each registers its kind)
from shared.model.attention.registry import ATTENTION_REGISTRY, build_attention, register_attention

__all__ = ["ATTENTION_REGISTRY", "build_attention", "register_attention"]
