"""Cluster section: where Ray work runs, and what the training workers ask Ray for.

A local in-process Ray by default, or a cluster address. On a cluster every stage requests the
resources it needs and Ray places it on a node that has them: the scorer's actors
(`scorer.scoring.actor_gpus`, `actor_accelerator_type`), the vLLM oracle
(`scorer.oracle.vllm`), and the training workers below. `gpu_nodes` declares the autoscaler's GPU
node groups (cluster/ray-cluster.yaml, cluster/kuberay-rayjob.yaml), so a request no group can
hold — a TP-8 engine on 1-GPU nodes — fails at `moelab config check` instead of waiting forever
for a node that will never come (`shared.placement`).
"""

from __future__ import annotations

from pydantic import Field

from shared.config.base import Section


class GpuNodeGroup(Section):
    """One GPU node type of the cluster (an autoscaler group)."""

    accelerator_type: str = Field("H100", min_length=1, description="Ray accelerator type of its GPUs (H100, L40S, ...).")
    gpus_per_node: int = Field(8, ge=1, le=64, description="GPUs on one node of the group.")
    max_nodes: int = Field(1, ge=1, le=100_000, description="Nodes the group may scale to.")


class ClusterConfig(Section):
    address: str | None = Field(
        None, description="Ray address to connect to ('auto', 'ray://host:10001'); None starts a local Ray."
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs for a local Ray (None: all cores).")
    namespace: str = Field("moelab", min_length=1, description="Ray namespace for named actors of the pipeline.")
    train_gpus_per_worker: float | None = Field(
        None, ge=0, le=8,
        description="GPUs each Ray Train worker reserves; None = 1 when the workers train on CUDA (train.device=cuda, or "
        "auto on a cluster with GPUs), else 0. Independent of train.device, which says where torch computes.",
    )
    train_cpus_per_worker: float | None = Field(
        None, gt=0, le=512, description="CPUs each Ray Train worker reserves; None = 1 with a GPU, else the local cores / workers."
    )
    train_accelerator_type: str | None = Field(
        None, min_length=1, description="Ray accelerator type the training workers need (e.g. H100); None = any GPU."
    )
    train_resources: dict[str, float] = Field(
        default_factory=dict, description="Extra custom Ray resources per training worker (e.g. {node_type_train: 1})."
    )
    gpu_nodes: list[GpuNodeGroup] = Field(
        default_factory=list, description="The cluster's GPU node groups, to validate GPU requests before a stage starts."
    )
