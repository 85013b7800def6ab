"""The job driver's torch threads: the CPUs Ray counts for this node, not the one Ray's job supervisor leaves it.

A Ray job's entrypoint is started by Ray's job supervisor, an actor, and inherits its
`OMP_NUM_THREADS=1`, so every stage that runs in the driver — the scorer's distillation and
calibration, and training when one CPU worker runs on the only node — ran on one core: on the
2-core demo machine half of it sat idle through 5 of the demo's 12 minutes. The count comes from
Ray's resources for this node (what `ray start --num-cpus` or the pod's CPU limit gave it), not
from the host, whose cores a container does not own. A thread count the user asked for stays:
`OMP_NUM_THREADS` set in the job's `runtime_env`, or in the environment of a pipeline started
outside a Ray job.
"""

from __future__ import annotations

import json
import os

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


def use_node_cpus(ray) -> int | None:
    """Set torch's intra-op threads to this node's Ray CPUs, unless the user chose a count; the
    count set, or None where nothing changed."""
    if user_set_threads():
        return None
    import torch

    cpus = node_cpus(ray)
    if cpus < 1 or cpus == torch.get_num_threads():
        return None
    torch.set_num_threads(cpus)
    return cpus
