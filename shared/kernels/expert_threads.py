"""Routed experts run concurrently, one single-threaded group of experts per core.

Why: one expert's work in the fused path (`shared.kernels.fused_experts`) is a few hundred rows:
its GEMMs split across two cores with OpenMP fork/join at every call, and its ~20 elementwise ops
are below ATen's parallel grain (32,768 elements), so they run on one core while the other waits.
Giving each core its own experts instead (on pool threads whose torch runs one intra-op thread
each, so nothing oversubscribes) keeps both busy through the elementwise work and the Python
between ops, which releases the GIL inside every ATen call. It also removes the fork/join
barriers, which on a shared machine stall a whole GEMM whenever one of its threads is descheduled.

Experts are cut into contiguous groups of about equal rows, the same cut for a given set of
per-expert counts and thread count, and each group accumulates into its own output buffer; the
buffers are summed in group order, so results are deterministic for a given thread count
(bitwise equal from run to run, equal to the serial order to float tolerance).

`MOELAB_EXPERT_THREADS`: `auto` (default: as `shared.kernels.expert_path_autotune` measured for
the machine and layer shape; where it did not measure, concurrent when torch has more than one
intra-op thread and the mean expert GEMM is below `CONCURRENT_MAX_EXPERT_MACS`), `off`, or a
number of groups to force.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

SETTING_ENV = "MOELAB_EXPERT_THREADS"
# Mean expert GEMM (rows × d × width) below which `auto` runs experts concurrently: measured with
# benchmarks/expert_fusion.py (see docs/moe.md); above it one expert's GEMMs use both cores well.
CONCURRENT_MAX_EXPERT_MACS = 1 << 26

_override: str | None = None  # `use_expert_threads`, ahead of the environment
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()
_init_lock = threading.Lock()  # serialises the pool threads' initializers (`_pool_lock` is held meanwhile)


def expert_groups(expert_macs: float, active_experts: int) -> int:
    """How many concurrent groups to run the experts in (1: serially, on torch's threads)."""
    setting = _override or os.environ.get(SETTING_ENV, "auto")
    threads = torch.get_num_threads()
    if setting == "off":
        return 1
    if setting != "auto":
        try:
            groups = int(setting)
        except ValueError:
            raise ValueError(f"{SETTING_ENV}={setting!r}; use auto, off or a number of groups") from None
        return max(1, min(groups, active_experts))
    if threads < 2 or expert_macs >= CONCURRENT_MAX_EXPERT_MACS:
        return 1
    return max(1, min(threads, active_experts // 2))


def explicit_setting() -> bool:
    """Whether a caller (`use_expert_threads`) or the environment asked for a setting other than `auto`."""
    return (_override or os.environ.get(SETTING_ENV, "auto")) != "auto"


@contextlib.contextmanager
def use_expert_threads(setting: str) -> Iterator[None]:
    """Run the enclosed code with `setting` (`auto`, `off` or a group count) instead of the environment's."""
    global _override
    previous, _override = _override, setting
    try:
        yield
    finally:
        _override = previous


def split_by_rows(counts: Sequence[int], groups: int) -> list[range]:
    """Contiguous expert ranges of about equal total rows (`groups` of them, some maybe empty)."""
    total = sum(counts)
    cuts, acc, g = [0], 0, 1
    for e, c in enumerate(counts):
        acc += c
        while g < groups and acc >= total * g / groups:
            cuts.append(e + 1)
            g += 1
    cuts += [len(counts)] * (groups + 1 - len(cuts))
    return [range(cuts[i], cuts[i + 1]) for i in range(groups)]


def _make_single_threaded() -> None:
    """A pool thread's initializer: torch's thread count for this thread becomes 1, once.

    `torch.set_num_threads` is not safe to call while other threads compute: besides this
    thread's OpenMP and MKL counts it resets process-wide state (the pthreadpool, oneDNN's
    primitive cache). So it runs here, serialised, while the pool is being built and nothing
    else computes, and never again per job."""
    with _init_lock:
        torch.get_num_threads()  # this thread's lazy thread-count initialisation happens now, not mid-job
        torch.set_num_threads(1)


def _pool_of(size: int) -> ThreadPoolExecutor:
    """The shared pool with at least `size` threads, every one of them already single-threaded."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is not None and _pool_size >= size:
            return _pool
        caller_threads = torch.get_num_threads()
        pool = ThreadPoolExecutor(size, thread_name_prefix="moelab-experts", initializer=_make_single_threaded)
        barrier = threading.Barrier(size)  # `size` tasks that wait for each other: `size` threads exist
        for f in [pool.submit(barrier.wait) for _ in range(size)]:
            f.result()
        torch.set_num_threads(caller_threads)  # the initializers also set the process default; restore it
        if _pool is not None:
            _pool.shutdown(wait=False)
        _pool, _pool_size = pool, size
        return pool


def _without_grad(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():  # grad mode is per thread; autograd Functions run their bodies without it
            fn()

    return run


def run_concurrently(jobs: Sequence[Callable[[], None]]) -> None:
    """Run `jobs` at once, each single-threaded: the first on the calling thread (so a profiler
    started there sees it), the others on pool threads. The caller's thread count is set to 1 and
    restored only while the pool is idle. Every job finishes before an exception propagates."""
    if len(jobs) == 1:
        jobs[0]()
        return
    pool = _pool_of(len(jobs) - 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        futures = [pool.submit(_without_grad(job)) for job in jobs[1:]]
        try:
            jobs[0]()
        finally:
            concurrent.futures.wait(futures)
        for f in futures:
            f.result()
    finally:
        torch.set_num_threads(threads)
