"""Run a function in N spawned gloo processes and get rank 0's result: the harness every
N-processes-vs-1 test uses (no Ray start-up; a crashed worker fails the test at once)."""

from __future__ import annotations

import os
import sys
from queue import Empty
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shared.net import free_port


def to_numpy(obj: Any) -> Any:
    """Tensors → numpy (they travel between processes by value; tensors would need the sender alive)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().numpy()
    if isinstance(obj, dict):
        return {k: to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_numpy(v) for v in obj)
    return obj


def to_torch(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj)
    if isinstance(obj, dict):
        return {k: to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_torch(v) for v in obj)
    return obj


def _worker(rank: int, world: int, port: int, fn, args: tuple, queue) -> None:
    """Runs `fn`, hands rank 0's result over, then leaves with `os._exit(0)` once every rank is done:
    the interpreter's normal teardown destroys torch's C++ thread objects (gloo's and the autograd
    engine's) in no fixed order, and now and then one is still joinable, which aborts the process
    ("terminate called without an active exception", exit -6) after the work has succeeded. A
    failure inside `fn` still raises and gives a non-zero exit code."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        if rank == 0:
            queue.put(to_numpy(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    queue.close()
    queue.join_thread()  # the result has left this process before it exits
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn, *args, world: int = 2, timeout_s: int = 600) -> Any:
    """`fn(rank, world, *args)` in `world` gloo processes; returns rank 0's return value.
    `fn` must be a module-level function (spawn pickles it by name)."""
    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, port, fn, args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    result, got = None, False
    for _ in range(timeout_s):  # poll, so a crashed worker fails the test at once instead of at the timeout
        try:
            result, got = queue.get(timeout=1), True
            break
        except Empty:
            assert all(p.exitcode in (None, 0) for p in procs), f"a worker failed: {[p.exitcode for p in procs]}"
    assert got, "workers timed out"
    for p in procs:
        p.join(timeout=300)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return to_torch(result)
