"""The job driver's torch threads: the CPUs Ray counts for this node, not the one Ray's job supervisor leaves it.

A Ray job's entrypoint is started by Ray's job supervisor, an actor, and inherits its
`OMP_NUM_THREADS=1`, so every stage that runs in the driver — the scorer's distillation and
calibration, and training when one CPU worker runs on the only node — ran on one core: on the
2-core demo machine half of it sat idle through 5 of the demo's 12 minutes. The count comes from
Ray's resources for this node (what `ray start --num-cpus` or the pod's CPU limit gave it), not
from the host, whose cores a container does not own; where Ray gives this node no CPUs (the
cluster specs' head, `CPU: 0`, which keeps tasks off it while the driver still runs there) it is
the container's CPU limit (cgroup `cpu.max`), else the cores this process may run on. A thread
count the user asked for stays:
`OMP_NUM_THREADS` set in the job's `runtime_env`, or in the environment of a pipeline started
outside a Ray job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shared.hardware import cpu_cores

JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in a job entrypoint's environment


def user_set_threads(environ: dict[str, str] | None = None) -> bool:
    """Whether `OMP_NUM_THREADS` is the user's: set outside a Ray job, or in the job's runtime_env."""
    env = os.environ if environ is None else environ
    if "OMP_NUM_THREADS" not in env:
        return False
    if JOB_CONFIG_ENV not in env:
        return True
    try:
        job_env = json.loads(env[JOB_CONFIG_ENV]).get("runtime_env", {}).get("env_vars", {}) or {}
    except (ValueError, AttributeError):
        return True  # unreadable: leave the setting as it is
    return "OMP_NUM_THREADS" in job_env


def node_cpus(ray) -> int:
    """The CPU resource Ray holds for the node this process runs on (0 if it cannot tell)."""
    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return int(node.get("Resources", {}).get("CPU", 0))
    return 0


def container_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The container's CPU limit (cgroup v2 `cpu.max`, rounded down, at least 1), else the cores
    this process may run on."""
    cores = cpu_cores()
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, int(int(quota) / int(period))))


def driver_cpus(ray) -> int:
    """CPUs for this driver's torch: this node's Ray CPUs, or the container's where Ray gives it none."""
    return node_cpus(ray) or container_cpus()


def use_node_cpus(ray) -> int | None:
    """Set torch's intra-op threads to this node's Ray CPUs, unless the user chose a count; the
    count set, or None where nothing changed."""
    if user_set_threads():
        return None
    import torch

    cpus = driver_cpus(ray)
    if cpus == torch.get_num_threads():
        return None
    torch.set_num_threads(cpus)
    return cpus
