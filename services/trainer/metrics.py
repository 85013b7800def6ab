"""Throughput, MFU and memory: the numbers that say whether a run uses its hardware.

MFU (PaLM's model FLOPs utilisation) = achieved model FLOP/s / peak FLOP/s, where achieved
FLOP/s counts 3 × the forward FLOPs per token (forward + backward's two matmuls per forward
matmul) of the *active* parameters and attention, times tokens/s. The peak is what
`moelab doctor` measured on this machine (stored), falling back to the chip's spec.
"""

from __future__ import annotations

import resource
import time

import torch

TRAIN_FLOPS_PER_FORWARD_FLOP = 3.0


def mfu(tokens_per_s: float, forward_flops_per_token: float, peak_flops: float | None) -> float | None:
    if not peak_flops:
        return None
    return tokens_per_s * forward_flops_per_token * TRAIN_FLOPS_PER_FORWARD_FLOP / peak_flops


def memory_gib(device: torch.device) -> float:
    """Peak device memory (CUDA) or the process's peak resident set (CPU), in GiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


class Throughput:
    """Tokens/s over the steps since the last `rate()` call (excludes eval and checkpoint time)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self, tokens: int) -> None:
        if self._t0 is not None:
            self.seconds += time.perf_counter() - self._t0
            self.tokens += tokens
            self._t0 = None

    def rate(self) -> float:
        value = self.tokens / self.seconds if self.seconds > 0 else 0.0
        self.tokens, self.seconds = 0, 0.0
        return value
