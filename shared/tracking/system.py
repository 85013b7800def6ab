"""System metrics a run logs on its own at a low rate: the process's CPU use and memory, the
machine's memory, and each CUDA device's utilisation and memory where the process uses CUDA.

Why read /proc rather than depend on psutil: the figures are a handful of counters Linux already
exposes, and the client must stay importable wherever a stage runs. Elsewhere the CPU figure
falls back to `os.times()` and the machine's memory is left out (not guessed).

Samples are logged under `system/…` keys with the sample number as their step (sample 0, 1, …),
not the training step: a step that lasts minutes would otherwise hold several samples at one
step. The dashboard draws them against wall time.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GIB = 2**30


def _meminfo() -> dict[str, int] | None:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out


def _rss_bytes() -> int | None:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _gpu_figures() -> dict[str, float]:
    """Per CUDA device: memory in use (GiB) and utilisation (%, where NVML answers). Only when the
    process has imported torch and uses CUDA: importing torch here would cost seconds."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    out = {}
    for i in range(torch.cuda.device_count()):
        out[f"system/gpu{i}/memory_gib"] = torch.cuda.memory_allocated(i) / GIB
        try:
            out[f"system/gpu{i}/utilization_percent"] = float(torch.cuda.utilization(i))
        except Exception:  # noqa: BLE001 - NVML (pynvml) absent or refusing: utilisation is left out
            pass
    return out


class SystemSampler:
    """One sample per call: CPU % since the previous call (100 = one core busy), memory figures."""

    def __init__(self) -> None:
        self._last = (time.monotonic(), self._cpu_seconds())

    @staticmethod
    def _cpu_seconds() -> float:
        t = os.times()
        return t.user + t.system

    def sample(self) -> dict[str, float]:
        now, cpu = time.monotonic(), self._cpu_seconds()
        then, cpu_then = self._last
        self._last = (now, cpu)
        out: dict[str, float] = {}
        if now > then:
            out["system/cpu_percent"] = 100.0 * (cpu - cpu_then) / (now - then)
        rss = _rss_bytes()
        if rss is not None:
            out["system/process_memory_gib"] = rss / GIB
        mem = _meminfo()
        if mem and mem.get("MemTotal"):
            used = mem["MemTotal"] - mem.get("MemAvailable", mem.get("MemFree", 0))
            out["system/memory_used_gib"] = used / GIB
            out["system/memory_used_fraction"] = used / mem["MemTotal"]
        out.update(_gpu_figures())
        return out


class SystemMonitor(threading.Thread):
    """Calls `log(metrics, sample_number)` every `every_s` seconds until `stop()`; the first sample
    is taken after one interval, so its CPU figure covers a whole interval."""

    def __init__(self, log: Callable[[dict[str, Any], int], None], every_s: float):
        super().__init__(name="tracking-system", daemon=True)
        self._log, self.every_s = log, every_s
        self._halt = threading.Event()
        self.samples = 0
        self._sampler = SystemSampler()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            self._log(self._sampler.sample(), self.samples)
            self.samples += 1

    def stop(self) -> None:
        self._halt.set()
