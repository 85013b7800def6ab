"""Launch training: a Ray Train `TorchTrainer` (gloo on CPU, NCCL on GPU), or one plain process.

Both paths call the same `train_worker`, so `--no-ray` debugging runs exactly the code a cluster
runs. Under Ray, Ray Train creates the process group; the plain path runs one process (rank 0 of
1), and `spawn_local` starts N plain processes with a gloo group (used by tests that compare
2-process and 1-process runs without paying Ray's start-up).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from shared.config import ExperimentConfig
from shared.config.loader import validate
from shared.net import free_port


def _device_for(cfg: ExperimentConfig, local_rank: int) -> torch.device:
    want = cfg.train.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("train.device=cuda but no CUDA device is visible; use train.device=cpu")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _ray_worker(config: dict[str, Any]) -> None:
    import ray
    import ray.train
    import torch.distributed as dist

    from services.trainer.loop import WorkerContext, train_worker

    # Ray Train starts each worker in its own trial folder; the config's relative paths (data/demo/…,
    # runs/…) mean the folder `moelab train` was started in, so go back to it where this node has it.
    if os.path.isdir(config["cwd"]):
        os.chdir(config["cwd"])
    ctx = ray.train.get_context()
    cfg = validate(config["cfg"], source="ray worker")
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if world > 1 and not dist.is_initialized():
        raise RuntimeError("Ray Train did not initialise the torch process group")
    device = _device_for(cfg, ctx.get_local_rank())
    result = train_worker(cfg, WorkerContext(rank, world, device), resume=config["resume"])
    metrics = {k: v for k, v in result.items() if isinstance(v, int | float | str | None)}
    metrics["ray_node_id"] = ray.get_runtime_context().get_node_id()  # where rank 0 really trained
    # Train V2 keeps only metrics attached to a checkpoint: rank 0 attaches a tiny one (the model
    # checkpoints themselves are ours, written with DCP under the run directory).
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            Path(tmp, "result.json").write_text(json.dumps(metrics))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)


def wants_gpu_workers(cfg: ExperimentConfig) -> bool:
    """Whether the training workers reserve GPUs: `cluster.train_gpus_per_worker` when set, else
    train.device=cuda, else (auto) whether the Ray cluster has GPUs — never the driver's own CUDA:
    on a cluster the driver runs on a CPU-only head."""
    gpus = cfg.cluster.train_gpus_per_worker
    if gpus is not None:
        return gpus > 0
    if cfg.train.device != "auto":
        return cfg.train.device == "cuda"
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def scaling_config(cfg: ExperimentConfig):
    """Ray Train's `ScalingConfig` from `cfg.cluster`: GPUs, CPUs, accelerator type and custom resources
    per worker. The head of a cluster advertises no GPU and `CPU: 0`, so workers never land there."""
    from ray.train import ScalingConfig

    c = cfg.cluster
    use_gpu = wants_gpu_workers(cfg)
    gpus = c.train_gpus_per_worker if c.train_gpus_per_worker is not None else (1.0 if use_gpu else 0.0)
    local_cpus = max(1, (c.num_cpus or os.cpu_count() or 2) // cfg.train.workers)
    cpus = c.train_cpus_per_worker or (1 if use_gpu else local_cpus)
    resources = {"CPU": cpus, **({"GPU": gpus} if use_gpu else {}), **c.train_resources}
    return ScalingConfig(num_workers=cfg.train.workers, use_gpu=use_gpu, resources_per_worker=resources,
                         accelerator_type=c.train_accelerator_type if use_gpu else None)


def run_ray(cfg: ExperimentConfig, resume: bool = False) -> dict[str, Any]:
    """Train with `cfg.train.workers` Ray Train workers; returns the final metrics of rank 0 (with
    `ray_node_id`, the node it ran on)."""
    import ray
    from ray.train import RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if not ray.is_initialized():
        ray.init(address=cfg.cluster.address, num_cpus=cfg.cluster.num_cpus, namespace=cfg.cluster.namespace,
                 include_dashboard=False, configure_logging=False)
    scaling = scaling_config(cfg)
    # the process-group backend follows where torch computes (train.device), not what Ray reserved
    nccl = cfg.train.device == "cuda" or (cfg.train.device == "auto" and scaling.use_gpu)
    trainer = TorchTrainer(
        _ray_worker,
        train_loop_config={"cfg": cfg.model_dump(mode="json"), "resume": resume, "cwd": os.getcwd()},
        torch_config=TorchConfig(backend="nccl" if nccl else "gloo"),
        scaling_config=scaling,
        run_config=RunConfig(name=cfg.train.run_name or cfg.name,
                             storage_path=str(Path(cfg.train.out_dir).resolve() / "ray")),
    )
    result = trainer.fit()
    if result.error:
        raise result.error
    return dict(result.metrics or {})


def run_local(cfg: ExperimentConfig, resume: bool = False) -> dict[str, Any]:
    """One process, no Ray: the debugging path (`moelab train --no-ray`)."""
    from services.trainer.loop import WorkerContext, train_worker

    if cfg.train.workers != 1:
        return spawn_local(cfg, resume=resume)
    return train_worker(cfg, WorkerContext(0, 1, _device_for(cfg, 0)), resume=resume)


def _spawned(rank: int, world: int, port: int, cfg_json: dict, resume: bool, queue) -> None:
    import faulthandler

    import torch.distributed as dist

    # A worker killed by a signal (a native abort, a segfault) would otherwise leave only its exit
    # code; this prints every thread's Python stack to stderr first.
    faulthandler.enable(all_threads=True)

    from services.trainer.loop import WorkerContext, train_worker

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cfg = validate(cfg_json, source="spawned worker")
    device = _device_for(cfg, rank)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        result = train_worker(cfg, WorkerContext(rank, world, device), resume=resume)
        queue.put((rank, result))
    finally:
        dist.destroy_process_group()


def spawn_local(cfg: ExperimentConfig, resume: bool = False) -> dict[str, Any]:
    """`cfg.train.workers` plain processes with a gloo/NCCL group; returns rank 0's result."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port, world = free_port(), cfg.train.workers
    procs = [ctx.Process(target=_spawned, args=(r, world, port, cfg.model_dump(mode="json"), resume, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, dict] = {}
    while len(results) < world:
        if not queue.empty():
            rank, res = queue.get()
            results[rank] = res
        elif any(p.exitcode not in (None, 0) for p in procs):
            for p in procs:
                p.terminate()
            codes = [p.exitcode for p in procs]
            raise RuntimeError(f"training workers failed with exit codes {codes} (a negative code is the signal "
                               "that killed the worker; its stack, if any, is on stderr above)")
        else:
            time.sleep(0.05)
    for p in procs:
        p.join()
    return results[0]
