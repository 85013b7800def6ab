"""The fp32 CPU GEMM library for each machine and shape class: measured once, cached, never assumed.

Why measure: which of torch's two CPU GEMM libraries is faster depends on the machine. MKL
(torch's `mm`, `F.linear`) picks its kernels by CPU *vendor*: on an AMD Zen 5 it runs its AVX2
code, and oneDNN's matmul (dispatching on the instruction set alone) measured 2.05× faster over
one expert's GEMMs (docs/moe.md). On an Intel Sapphire Rapids MKL runs its AVX-512 code, and
oneDNN measured 0.87–1.15× MKL on forward and input-gradient layouts and 0.38–0.75× on
weight-gradient layouts (transposed operands); with both capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2`) 0.49–1.12× (benchmarks/cpu_gemm.py; docs/moe.md). A fixed rule
written on one machine made the other slower than plain PyTorch (a training step at 0.89× HF's
on an AVX2 EPYC), so each machine measures its own.

A *shape class* is what one choice covers: the product's rows m, reduction length k and output
width n, each rounded up to a power of two; the layout of both operands (`r` row-major, `c` a
transposed view, `s` other strides); the number of torch threads; and whether the caller's row
count (`vary="m"`) or reduction length (`vary="k"`) changes from call to call, as the routed
experts' per-expert row counts do every step. The first product of a class is timed with both
libraries, interleaved round by round, on operands of its exact shape and layout; the minimum
per-call time of each is kept (load from other jobs only ever adds time). oneDNN wins a class
only when it is at least `MARGIN` faster in two measurements in a row; anything closer runs on
MKL, which is what plain PyTorch runs. On a busy machine (load average above the cores + 1) a
class runs MKL and its measurement is kept only as provisional, to be taken again by the next
process: timings then say more about the scheduler than the code. For a varying class oneDNN is timed on a new shape at
every call: it builds (and JIT-compiles) one primitive per shape, ≈ 0.5 ms at 512×512×128 on
Sapphire Rapids against 0.3 ms for the product itself, a cost a routed expert pays whenever its
row count is new.

Cache: `$MOELAB_HOME/cpu_gemm_autotune.json` (default `~/.cache/moelab`), one section per machine
key: a hash of the CPU model, its flags, the ISA-capping variables (`ISA_ENV_VARS`) and the torch
version, so an AVX2-capped run on an AVX-512 machine keeps its own choices. Rewritten atomically
(under a lock file, merged with what other processes wrote) after each new class. `moelab doctor`
prints it; `moelab doctor --retune` clears this machine's section and measures again.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor

from shared.data.atomic import atomic_write_json

CACHE_FILE = "cpu_gemm_autotune.json"
CACHE_VERSION = 1
# Variables that change which kernels MKL, oneDNN or ATen run; read when each library starts.
ISA_ENV_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE",
                "MKL_CBWR", "ATEN_CPU_CAPABILITY")
# Flags worth printing (the key hashes all of them).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16")
# oneDNN must be this much faster (in both measurements) to be chosen. Wide, because a wrong oneDNN
# choice is a slowdown against plain PyTorch while a missed one only forgoes a gain, and the gains
# that exist are large (2× on AMD Zen 5) while the near-ties (0.9–1.15× on Sapphire Rapids) flip
# with the load on a shared machine.
MARGIN = 0.10
ROUNDS = 7
ROUND_TARGET_S = 2e-3  # calls per round are sized so a round of one library takes about this long
MAX_CALLS_PER_ROUND = 32


@functools.cache
def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    model, flags = platform.processor() or platform.machine(), ()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model in (platform.processor(), platform.machine()):
                model = value.strip()
            elif key == "flags" and not flags:
                flags = tuple(sorted(value.split()))
    return model, flags


def machine_fingerprint() -> dict:
    """What the GEMM choices depend on: CPU model and flags, ISA-capping variables, torch version."""
    model, flags = _cpuinfo()
    return {
        "cpu": model,
        "isa_flags": [f for f in ISA_FLAGS if f in flags],
        "flags_sha256": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16],
        "env": {v: os.environ[v] for v in ISA_ENV_VARS if v in os.environ},
        "torch": torch.__version__,
    }


def machine_key(fingerprint: dict | None = None) -> str:
    blob = json.dumps(fingerprint or machine_fingerprint(), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_path(name: str = CACHE_FILE) -> Path:
    return Path(os.environ.get("MOELAB_HOME", Path.home() / ".cache" / "moelab")) / name


def _pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def layout_of(t: Tensor) -> str:
    """`r` row-major (unit stride along rows), `c` a transposed view (unit stride down columns), `s` other."""
    if t.stride(-1) == 1:
        return "r"
    return "c" if t.stride(0) == 1 else "s"


@dataclass(frozen=True)
class ShapeClass:
    """The products one choice covers (see the module docstring)."""

    m: int
    k: int
    n: int
    layout: str
    threads: int
    vary: str = ""

    @classmethod
    def of(cls, m: int, k: int, n: int, layout: str, vary: str = "", threads: int | None = None) -> ShapeClass:
        return cls(_pow2(m), _pow2(k), _pow2(n), layout, threads or torch.get_num_threads(), vary)

    @property
    def label(self) -> str:
        return f"m{self.m}.k{self.k}.n{self.n}.{self.layout}.t{self.threads}" + (f".vary-{self.vary}" if self.vary else "")


def _mkl_nt(a: Tensor, b: Tensor) -> Tensor:
    return torch.mm(a, b.t())


def _onednn_nt(a: Tensor, b: Tensor) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


GEMMS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"mkl": _mkl_nt, "onednn": _onednn_nt}


def operands(m: int, k: int, n: int, layout: str, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random a (m, k) and b (n, k) for a·bᵀ with the given layout letters (`s` built row-major)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, m, generator=g).t() if layout[0] == "c" else torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g).t() if layout[1] == "c" else torch.randn(n, k, generator=g)
    return a, b


def _variants(a: Tensor, b: Tensor, vary: str, count: int, start: int) -> list[tuple[Tensor, Tensor]]:
    """`count` operand pairs; with `vary`, each a shape not used before (rows or reduction cut by 1, 2, …)."""
    if not vary:
        return [(a, b)] * count
    size = a.shape[0] if vary == "m" else a.shape[1]
    span = max(1, min(size // 2, 256))
    cuts = [(start + i) % span for i in range(count)]
    if vary == "m":
        return [(a[: size - c], b) for c in cuts]
    return [(a[:, : size - c], b[:, : size - c]) for c in cuts]


def time_gemms(gemms: dict[str, Callable[[Tensor, Tensor], Tensor]], a: Tensor, b: Tensor, vary: str = "",
               rounds: int = ROUNDS) -> dict[str, float]:
    """Seconds per a·bᵀ of each named implementation: every call timed alone, the fastest kept
    (per multiply-add, so a call cut shorter by `vary` counts for what it is), in rounds that
    interleave the implementations (order alternating) on the same operands, or the same new
    shapes with `vary`. On a shared machine other jobs only ever add time, and a short call is
    more likely than a long batch to fall in a quiet moment."""
    names = list(gemms)
    with torch.no_grad():
        t0 = time.perf_counter()
        for gemm in gemms.values():
            gemm(a, b)
        per_call = (time.perf_counter() - t0) / len(gemms)
        calls = max(1, min(MAX_CALLS_PER_ROUND, int(ROUND_TARGET_S / max(per_call, 1e-7))))
        best = dict.fromkeys(names, float("inf"))
        used = 1
        for r in range(rounds):
            pairs = _variants(a, b, vary, calls, used)
            used += calls
            for name in names if r % 2 == 0 else names[::-1]:
                gemm = gemms[name]
                for x, y in pairs:
                    t0 = time.perf_counter()
                    gemm(x, y)
                    best[name] = min(best[name], (time.perf_counter() - t0) / (x.shape[0] * x.shape[1]))
    return {name: t * a.shape[0] * a.shape[1] for name, t in best.items()}


def machine_is_busy() -> bool:
    """More runnable work than cores: the 1-minute load average above the cores this process may
    use, plus one. Timings taken then measure the scheduler more than the code: on a shared
    2-core machine at load 5–37 the tuner handed weight-gradient classes to oneDNN that ran at
    0.56–0.66× MKL once the load fell (a 2-thread GEMM waits for whichever thread is descheduled,
    and the two libraries split small products over threads differently)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return False
    return load > len(os.sched_getaffinity(0)) + 1


@dataclass
class Measurement:
    library: str
    mkl_us: float
    onednn_us: float
    m: int  # the exact product measured (the class rounds these up)
    k: int
    n: int
    provisional: bool = False  # measured on a busy machine: MKL meanwhile, measured again next process

    @property
    def onednn_speedup(self) -> float:
        return self.mkl_us / self.onednn_us


def measure(cls: ShapeClass, m: int, k: int, n: int) -> Measurement:
    """Time both libraries on an m×k×n product of `cls`'s layout. oneDNN must win by `MARGIN`, then
    again over three times the rounds: a stretch of unlucky MKL calls must not hand a class to
    oneDNN (the safe side of a close call is MKL, what plain PyTorch runs). On a busy machine
    (`machine_is_busy`) the class runs MKL and the result is provisional."""
    a, b = operands(m, k, n, cls.layout)
    busy = machine_is_busy()
    first = time_gemms(GEMMS, a, b, cls.vary)
    wins = first["onednn"] < (1 - MARGIN) * first["mkl"] and not busy
    t = first
    if wins:  # the longer, confirming measurement decides and is the one recorded
        t = time_gemms(GEMMS, a, b, cls.vary, rounds=3 * ROUNDS)
        wins = t["onednn"] < (1 - MARGIN) * t["mkl"]
    return Measurement("onednn" if wins else "mkl", t["mkl"] * 1e6, t["onednn"] * 1e6, m, k, n, provisional=busy)


class GemmAutotuner:
    """This process's per-class choices: loaded from `cache_path()` at first use, extended by
    measuring each new class (and saved back at once).

    Lookups are a tuple hash away (≈ 1 µs with the class arithmetic), so they can sit in front of
    every GEMM the model runs. The machine key is computed once: MKL and oneDNN read the ISA
    variables when they start, so changing them later in the process changes nothing that runs.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._choices: dict[tuple, str] | None = None
        self._key: str | None = None
        self.measured = 0  # classes measured since the last `reset` (tests count them)

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = machine_key()
        return self._key

    def library(self, m: int, k: int, n: int, layout: str, vary: str = "") -> str:
        """`mkl` or `onednn` for an m×k×n product a·bᵀ (a m×k, b n×k) with operand layouts `layout`."""
        index = (1 << (m - 1).bit_length(), 1 << (k - 1).bit_length(), 1 << (n - 1).bit_length(), layout,
                 torch.get_num_threads(), vary)
        choices = self._choices if self._choices is not None else self._load()
        lib = choices.get(index)
        if lib is None:
            with self._lock:
                lib = self._choices.get(index) or self._tune(ShapeClass(*index), m, k, n)
        return lib

    def _load(self) -> dict[tuple, str]:
        with self._lock:
            if self._choices is None:
                section = read_cache().get(self.key, {})
                self._choices = {_index(ShapeClass(**e["class"])): e["library"]
                                 for e in section.get("classes", {}).values() if not e.get("provisional")}
            return self._choices

    def _tune(self, cls: ShapeClass, m: int, k: int, n: int) -> str:
        result = measure(cls, m, k, n)
        self.measured += 1
        self._choices[_index(cls)] = result.library
        entry = {"class": asdict(cls), **asdict(result), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                 "load_average": round(os.getloadavg()[0], 2)}
        with locked_cache() as data:
            section = data["machines"].setdefault(self.key, {"fingerprint": machine_fingerprint(), "classes": {}})
            section["classes"][cls.label] = entry
        return result.library

    def force(self, cls: ShapeClass, library: str) -> None:
        """Pin one class's choice in memory (tests use it to check that a wrong choice is caught)."""
        self._load()
        with self._lock:
            self._choices[_index(cls)] = library

    def choices(self) -> dict[ShapeClass, str]:
        return {ShapeClass(*index): lib for index, lib in self._load().items()}

    def reset(self) -> None:
        """Forget the in-memory choices (and the key): the next lookup reloads from `cache_path()`."""
        with self._lock:
            self._choices, self._key, self.measured = None, None, 0

    def clear(self) -> None:
        """Forget this machine's choices, in memory and on disk (`moelab doctor --retune`)."""
        with self._lock, locked_cache() as data:
            data["machines"].pop(self.key, None)
            self._choices = {}


def _index(cls: ShapeClass) -> tuple:
    return (cls.m, cls.k, cls.n, cls.layout, cls.threads, cls.vary)


def read_cache(name: str = CACHE_FILE) -> dict:
    """The cache file's `machines` table; a missing file is empty, an unreadable one is reported and ignored."""
    path = cache_path(name)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if data.get("version") != CACHE_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {CACHE_VERSION}")
        return data["machines"]
    except (ValueError, KeyError, TypeError, OSError) as exc:
        warnings.warn(f"ignoring the CPU autotune cache {path} ({exc}); it will be measured again and rewritten",
                      stacklevel=2)
        return {}


@contextlib.contextmanager
def locked_cache(name: str = CACHE_FILE) -> Iterator[dict]:
    """The cache's content, for editing under an exclusive lock; written back atomically on exit."""
    path = cache_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = {"version": CACHE_VERSION, "machines": read_cache(name)}
        yield data
        atomic_write_json(path, data)


TUNER = GemmAutotuner()


def verify_choices(tuner: GemmAutotuner = TUNER, rounds: int = 15) -> list[dict]:
    """Re-time every cached class of this machine at the current thread count: the dispatch as the
    model runs it (a class lookup, then the chosen library) against plain `torch.mm` (MKL).

    `ratio` = plain time / ours (≥ 1: ours is not slower). A class below 0.95 is timed again with
    2×, 4× and 8× the rounds, keeping the best ratio, so slow spells on a shared machine do not
    fail it, while a wrong choice (oneDNN where it is slower) still does.
    """
    section = read_cache().get(tuner.key, {}).get("classes", {})
    rows = []
    for cls in tuner.choices():
        entry = section.get(cls.label)
        if entry is None or cls.threads != torch.get_num_threads():
            continue
        m, k, n = entry["m"], entry["k"], entry["n"]
        a, b = operands(m, k, n, cls.layout, seed=1)

        def ours(x: Tensor, y: Tensor, m=m, k=k, n=n, cls=cls) -> Tensor:
            return GEMMS[tuner.library(m, k, n, cls.layout, cls.vary)](x, y)

        ratio = 0.0
        for attempt in range(4):
            t = time_gemms({"plain": _mkl_nt, "ours": ours}, a, b, cls.vary, rounds * 2**attempt)
            ratio = max(ratio, t["plain"] / t["ours"])
            if ratio >= 0.95:
                break
        rows.append({"class": cls.label, "library": tuner.library(m, k, n, cls.layout, cls.vary), "ratio": ratio,
                     "m": m, "k": k, "n": n})
    return rows
