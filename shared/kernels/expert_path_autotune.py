"""How the routed experts run on a CPU, per machine and layer shape: measured once, cached, never assumed.

The routed path can run three ways on a CPU: `loop` (whole-tensor permute, one grouped GEMM per
projection, combine), `fused` (per expert: gather, SwiGLU, scatter while its rows sit in cache,
`shared.kernels.fused_experts`) and `fused-concurrent` (the same, experts split into one
single-threaded group per core, `shared.kernels.expert_threads`). Which is fastest depends on the
machine as much as on the shape. On the AMD Zen 5 where fixed multiply-add thresholds were set,
fusing measured 1.09–2.49× the loop path above 2²¹ multiply-adds per expert GEMM; on an Intel
Sapphire Rapids at the train-step benchmark's layer (2,048 tokens, d 256, 16 experts × 128, top-2)
`fused-concurrent`, the thresholds' pick, ran at 0.67× the loop path, while at the MoE-layer
benchmark's shape (4,096 tokens, d 512, 64 × 128, top-8) it was the fastest of the three
(benchmarks/expert_fusion.py prints the grid). A rule written on one machine made the other slower.

So `auto` measures. A *path class* is a layer shape: tokens per call rounded up to a power of two,
d_model, expert width, experts, top-k, and torch's thread count. The first call of a class times
the three ways (two when one thread) on random inputs of its exact shape with uniform random
routing, forward + backward, interleaved round by round after `WARMUP_ROUNDS` untimed calls each
(the first also lets the GEMM autotune measure its classes); the fastest call of each is kept,
since load from other jobs only ever adds time. A fused way must beat the next simpler one (`loop`,
then `fused`) by `MARGIN` to be chosen. One process's measurement is not final: a slow spell can
last minutes on a shared VM (on a 2-core AMD EPYC, the first process after boot timed `fused` at
46.8 ms and `fused-concurrent` at 40.8 at the train-step layer, a later one 25.5 and 30.7, and the
cached concurrent pick then ran the training step 15% slower). So the first `CONFIRMATIONS`
processes that meet a class each measure it once more; the cache keeps each way's fastest time over
all of them and the choice is made again from those, so a spell in one process cannot fix the
choice. Within a process the choice never changes (a recomputed forward must run the way the first
did). On a busy machine (`gemm_autotune.machine_is_busy`), or where gradients are off (evaluation),
a cached choice is used as it is, and a class with none is left to the fixed rules (nothing
cached). The choice changes float rounding only (the three ways compute the same sums in different
orders), never what is computed.

Cache: `$MOELAB_HOME/cpu_expert_path_autotune.json`, one section per machine key (the GEMM
autotune's: CPU model, flags, ISA caps, torch version); `moelab doctor` prints it.
`MOELAB_EXPERT_PATH=loop|fused|fused-concurrent|rules` pins a way (`rules`: the fixed thresholds).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass

import torch

from shared.kernels import gemm_autotune

CACHE_FILE = "cpu_expert_path_autotune.json"
SETTING_ENV = "MOELAB_EXPERT_PATH"
WAYS = ("loop", "fused", "fused-concurrent")
# A fused way must be this much faster than the simpler way before it to be chosen: the loop path
# is the one every precision wrapper and GPU also runs, so near-ties go to it.
MARGIN = 0.05
# Timed rounds: as many as fit in `BUDGET_S` (a round is one call of each way), within these bounds;
# small layers get many rounds, since a millisecond call is easily caught by one slow spell.
MIN_ROUNDS, MAX_ROUNDS, BUDGET_S = 6, 40, 1.0
# Untimed rounds first. The loop way's whole-layer tensors come from fresh pages until the
# allocator has been through a few calls: after one untimed round, the first timed window at the
# train-step layer read `loop` 14% slower than `fused`, later windows 3-10% faster.
WARMUP_ROUNDS = 3
# Processes that measure a class before its choice is final (each keeps the faster time per way).
CONFIRMATIONS = 3


@dataclass(frozen=True)
class PathClass:
    tokens: int  # per call, rounded up to a power of two
    d_model: int
    hidden: int
    experts: int
    top_k: int
    threads: int

    @property
    def label(self) -> str:
        return f"T{self.tokens}.d{self.d_model}.F{self.hidden}.E{self.experts}.K{self.top_k}.t{self.threads}"


def ways_for(threads: int) -> tuple[str, ...]:
    return WAYS if threads > 1 else WAYS[:2]


def time_ways(cls: PathClass, rounds: int | None = None) -> dict[str, float]:
    """Fastest forward + backward, in seconds, of each way on random inputs of `cls`'s shape
    (`rounds` timed rounds after `WARMUP_ROUNDS` untimed ones; by default as many as fit in `BUDGET_S`)."""
    from shared.kernels.dispatch import moe_experts_forward
    from shared.kernels.expert_threads import use_expert_threads

    T, D, F, E, K = cls.tokens, cls.d_model, cls.hidden, cls.experts, cls.top_k
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, D, generator=g, requires_grad=True)
    w1, w3 = ((torch.randn(E, F, D, generator=g) / D**0.5).requires_grad_() for _ in range(2))
    w2 = (torch.randn(E, D, F, generator=g) / F**0.5).requires_grad_()
    weights, idx = torch.rand(T, E, generator=g).topk(K, dim=-1)
    weights.requires_grad_()
    dy = torch.randn(T, D, generator=g)
    settings = {"loop": ("loop", "off"), "fused": ("fused", "off"), "fused-concurrent": ("fused", str(cls.threads))}
    ways = ways_for(cls.threads)
    best = dict.fromkeys(ways, float("inf"))

    def one_round(order: tuple[str, ...], timed: bool) -> float:
        spent = 0.0
        for way in order:
            backend, threads = settings[way]
            for t in (x, weights, w1, w3, w2):
                t.grad = None
            t0 = time.perf_counter()
            with use_expert_threads(threads):
                moe_experts_forward(x, idx, weights, w1, w3, w2, backend=backend)[0].backward(dy)
            elapsed = time.perf_counter() - t0
            spent += elapsed
            if timed:
                best[way] = min(best[way], elapsed)
        return spent

    with torch.enable_grad():
        first = min(one_round(ways, timed=False) for _ in range(WARMUP_ROUNDS))  # allocations, GEMM classes
        if rounds is None:
            rounds = max(MIN_ROUNDS, min(MAX_ROUNDS, int(BUDGET_S / max(first, 1e-6))))
        for r in range(rounds):
            one_round(ways if r % 2 == 0 else ways[::-1], timed=True)
    return best


def pick(times: dict[str, float]) -> str:
    """The fastest way, each fused way needing `MARGIN` over the simpler way chosen so far."""
    choice = "loop"
    for way in WAYS[1:]:
        if way in times and times[way] < (1 - MARGIN) * times[choice]:
            choice = way
    return choice


class ExpertPathAutotuner:
    """This process's per-class choices, loaded from the cache at first use and extended by measuring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._choices: dict[PathClass, str | None] | None = None
        self._unconfirmed: set[PathClass] = set()  # cached, but measured by fewer than CONFIRMATIONS processes
        self.measured = 0

    def way(self, tokens: int, d_model: int, hidden: int, experts: int, top_k: int) -> str | None:
        """`loop`, `fused` or `fused-concurrent` for this layer shape; None where the fixed rules decide."""
        setting = os.environ.get(SETTING_ENV, "auto")
        if setting in WAYS:
            return setting
        if setting == "rules":
            return None
        if setting != "auto":
            raise ValueError(f"{SETTING_ENV}={setting!r}; use auto, rules or one of {', '.join(WAYS)}")
        cls = PathClass(1 << max(0, tokens - 1).bit_length(), d_model, hidden, experts, top_k, torch.get_num_threads())
        choices = self._choices if self._choices is not None else self._load()
        if cls in choices and cls not in self._unconfirmed:
            return choices[cls]
        if not torch.is_grad_enabled() or torch.is_autocast_enabled("cpu"):
            return choices.get(cls)
        with self._lock:
            if cls in self._choices and cls not in self._unconfirmed:
                return self._choices[cls]
            self._unconfirmed.discard(cls)  # whatever happens now, this process's choice is made
            if gemm_autotune.machine_is_busy():
                # a cached choice, or else the fixed rules, for the rest of this process (a
                # recomputed forward must run the way the first did); measured by a later process
                return self._choices.setdefault(cls, None)
            return self._tune(cls)

    def _load(self) -> dict[PathClass, str | None]:
        with self._lock:
            if self._choices is None:
                section = gemm_autotune.read_cache(CACHE_FILE).get(gemm_autotune.TUNER.key, {})
                entries = section.get("classes", {}).values()
                self._choices = {PathClass(**e["class"]): e["way"] for e in entries}
                self._unconfirmed = {PathClass(**e["class"]) for e in entries
                                     if e.get("confirmations", 1) < CONFIRMATIONS}
            return self._choices

    def _tune(self, cls: PathClass) -> str:
        times = {k: v * 1e3 for k, v in time_ways(cls).items()}
        self.measured += 1
        with gemm_autotune.locked_cache(CACHE_FILE) as data:
            section = data["machines"].setdefault(gemm_autotune.TUNER.key,
                                                  {"fingerprint": gemm_autotune.machine_fingerprint(), "classes": {}})
            before = section["classes"].get(cls.label, {})
            ms = {k: round(min(v, before.get("ms", {}).get(k, float("inf"))), 3) for k, v in times.items()}
            way = pick(ms)
            section["classes"][cls.label] = {
                "class": asdict(cls), "way": way, "ms": ms, "confirmations": before.get("confirmations", 0) + 1,
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average": round(os.getloadavg()[0], 2)}
        self._choices[cls] = way
        return way

    def reset(self) -> None:
        """Forget the in-memory choices: the next lookup reloads from the cache."""
        with self._lock:
            self._choices, self._unconfirmed, self.measured = None, set(), 0

    def clear(self) -> None:
        """Forget this machine's choices, in memory and on disk (`moelab doctor --retune`)."""
        with self._lock, gemm_autotune.locked_cache(CACHE_FILE) as data:
            data["machines"].pop(gemm_autotune.TUNER.key, None)
            self._choices, self._unconfirmed = {}, set()


def cached_entries() -> dict[str, dict]:
    """This machine's measured classes as stored (label → entry), for `moelab doctor`."""
    return gemm_autotune.read_cache(CACHE_FILE).get(gemm_autotune.TUNER.key, {}).get("classes", {})


TUNER = ExpertPathAutotuner()
