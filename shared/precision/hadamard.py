"""Blockwise random Hadamard transform (RHT) along a GEMM's reduction dimension.

Why: an outlier in a 16-element nvfp4 block inflates the block scale and flushes its neighbours
to zero. Multiplying both GEMM operands by the same orthogonal matrix T = diag(signs)·H/√n along
the reduction dimension leaves the product unchanged, (A T)(B T)ᵀ = A Bᵀ, while spreading each
outlier over n elements. NVIDIA's NVFP4 recipe (arXiv 2509.25149) applies a 16-point RHT to the
inputs of the Wgrad GEMM; `precision.hadamard` chooses where we apply it.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=16)
def _sylvester(n: int) -> torch.Tensor:
    if n & (n - 1) or n < 1:
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@functools.lru_cache(maxsize=64)
def random_hadamard(n: int, seed: int) -> torch.Tensor:
    """The n×n orthogonal matrix diag(±1)·H_n/√n with signs drawn from `seed` (fp32, CPU)."""
    gen = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=gen).float() * 2 - 1
    return signs[:, None] * _sylvester(n) / n**0.5


def hadamard_last_dim(x: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """Apply the random Hadamard transform to consecutive n-blocks of the last dim (zero-padded)."""
    cols = x.shape[-1]
    pad = (-cols) % n
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    t = random_hadamard(n, seed).to(device=x.device, dtype=torch.float32)
    y = (x.float().reshape(*x.shape[:-1], -1, n) @ t).reshape(*x.shape[:-1], -1)
    return y
