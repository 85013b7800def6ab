"""Expert counts as a fixed-size histogram: no host sync, no data-dependent shape.

Why not `torch.bincount`: its output length is `max(minlength, max(x) + 1)`, so it reads the
largest index back to the host before it can allocate (a device sync per call on CUDA, three per
MoE layer per forward where it was used), and `torch._dynamo` cannot trace a shape that depends on
the data, so every call was a graph break. The number of experts is known, so the counts are a
`scatter_add_` of ones into a length-E tensor: the same integers, computed on the device, traced
whole. Integer additions are exact, so the result does not depend on the order the device applies
them in (deterministic on CUDA too).
"""

from __future__ import annotations

import torch
from torch import Tensor


def expert_histogram(idx: Tensor, n_experts: int) -> Tensor:
    """How many entries of `idx` (any shape, integers in [0, n_experts)) name each expert: (E,) int64.

    Equal to `torch.bincount(idx.reshape(-1), minlength=n_experts)` for in-range indices; an index
    out of range is an error of the caller (a device-side assert on CUDA, an IndexError on CPU)."""
    flat = idx.reshape(-1)
    counts_E = torch.zeros(n_experts, dtype=torch.int64, device=idx.device)
    return counts_E.scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int64))
