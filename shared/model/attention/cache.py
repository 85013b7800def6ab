"""Decode-time state for attention layers: what a layer keeps per sequence so a new token attends
to the past without recomputing it.

GQA keeps each KV head's rotated keys and values; MLA keeps its compressed latent `c_kv` and the
one shared RoPE key (DeepSeek-V2 §2.1: the point of MLA is that this is all it needs). Kinds with
no cache here (SWA, NSA, KDA) are recomputed over the whole sequence by `shared.model.generate`.
The training path never touches any of this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from shared.model.rope import RotaryEmbedding, apply_rope_half


@dataclass
class LayerCache:
    """One layer's cached tensors along the sequence axis (`seq_dims` gives each one's axis)."""

    tensors: dict[str, Tensor] = field(default_factory=dict)
    seq_dims: dict[str, int] = field(default_factory=dict)

    @property
    def length(self) -> int:
        if not self.tensors:
            return 0
        name = next(iter(self.tensors))
        return self.tensors[name].shape[self.seq_dims[name]]

    def append(self, name: str, new: Tensor, seq_dim: int) -> Tensor:
        """Concatenate `new` after what is cached under `name`; returns the whole cached tensor."""
        old = self.tensors.get(name)
        self.tensors[name] = new if old is None else torch.cat([old, new], dim=seq_dim)
        self.seq_dims[name] = seq_dim
        return self.tensors[name]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def rope_at(rope: RotaryEmbedding, x: Tensor, start: int) -> Tensor:
    """Rotate x (..., t, dim) as positions start .. start + t - 1."""
    t = x.shape[-2]
    if start + t > rope.max_seq_len:
        raise ValueError(f"position {start + t - 1} exceeds model.max_seq_len ({rope.max_seq_len}); generate "
                         "fewer tokens or use a model with a longer max_seq_len")
    h = rope.dim // 2
    return apply_rope_half(x, rope.cos_TD[start:start + t, :h], rope.sin_TD[start:start + t, :h])


def causal_mask(t: int, start: int, device: torch.device) -> Tensor:
    """(t, start + t) boolean mask: query i (position start + i) sees keys 0 .. start + i."""
    q_pos = torch.arange(start, start + t, device=device)[:, None]
    return torch.arange(start + t, device=device)[None, :] <= q_pos
