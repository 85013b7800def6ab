"""Throughput, MFU and memory: the numbers that say whether a run uses its hardware.

MFU (PaLM's model FLOPs utilisation, Chowdhery et al. 2022, appendix B) = achieved model FLOP/s
/ peak FLOP/s, where achieved FLOP/s = tokens/s × the *training* FLOPs per token that
`shared.model.flops_per_token` returns (6·N_active_matmul + 12·L·H·d_head·T: forward and
backward already counted there, so nothing multiplies it again). The peak is what `moelab doctor`
measured on this machine (stored), falling back to the chip's spec.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import torch


def mfu(tokens_per_s: float, train_flops_per_token: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation of one device: tokens/s × training FLOPs per token / peak FLOP/s."""
    if not peak_flops:
        return None
    return tokens_per_s * train_flops_per_token / peak_flops


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


class MetricsFile:
    """Every logged metric as JSON lines `{"step": s, ...}` under the run directory (rank 0).

    A local record that needs no tracker server: scripts and tests read a run's curves from it.
    Lines are appended and flushed as they are logged; a resumed run appends after the killed
    run's lines, so a reader keeps the last line per (step, key) (`read_metrics`).
    """

    def __init__(self, path: str | os.PathLike, enabled: bool = True) -> None:
        self.path = Path(path)
        self._fh = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open for the run)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if self._fh is None:
            return
        row = {"step": step, **{k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                                for k, v in metrics.items()}}
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_metrics(path: str | os.PathLike) -> dict[str, dict[int, Any]]:
    """{metric: {step: value}} from a `metrics.jsonl` (later lines win)."""
    series: dict[str, dict[int, Any]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        step = row.pop("step")
        for key, value in row.items():
            series.setdefault(key, {})[step] = float(value) if isinstance(value, str) else value
    return series
