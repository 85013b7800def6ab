"""Can the cluster hold a GPU request? Checked before a stage asks Ray for it.

Ray never refuses an impossible request: a vLLM engine that wants 8 GPUs on one node, on a cluster
whose GPU nodes have 1, simply waits (and an autoscaler waits for a node type that does not
exist). So every GPU stage states its request — GPUs per unit (all on one node), units, and the
accelerator type — and it is checked against the GPU nodes the config declares
(`cluster.gpu_nodes`, what the autoscaler can add) and, at stage start, the nodes alive in the
Ray cluster. The error names the stage, the request and what the cluster offers.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config.cluster import GpuNodeGroup


class PlacementError(ValueError):
    """A GPU request no node of the cluster can hold."""


@dataclass(frozen=True)
class GpuRequest:
    what: str  # the config field that asks, e.g. scorer.oracle.vllm
    gpus_per_unit: float  # GPUs one unit needs on one node (a vLLM engine: its TP size)
    units: int  # replicas / actors / workers
    accelerator_type: str | None = None

    def describe(self) -> str:
        accel = f" {self.accelerator_type}" if self.accelerator_type else ""
        return f"{self.what}: {self.units} × {self.gpus_per_unit:g}{accel} GPU(s) on one node each"


@dataclass(frozen=True)
class GpuNode:
    """GPUs of one node (alive, or the most a declared group's node has) and how many such nodes."""

    accelerator_type: str | None
    gpus: float
    count: int = 1


def live_gpu_nodes() -> list[GpuNode]:
    """The alive nodes of the connected Ray cluster that have GPUs."""
    import ray

    out = []
    for node in ray.nodes():
        res = node.get("Resources", {})
        if node.get("Alive") and res.get("GPU", 0) > 0:
            accel = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
            out.append(GpuNode(accel, float(res["GPU"])))
    return out


def declared_nodes(groups: list[GpuNodeGroup]) -> list[GpuNode]:
    return [GpuNode(g.accelerator_type, float(g.gpus_per_node), g.max_nodes) for g in groups]


def check_gpu_request(req: GpuRequest, nodes: list[GpuNode]) -> None:
    """Raise `PlacementError` unless some node type can hold one unit and all of them fit.

    `nodes` are the live nodes plus the declared groups; a request with no GPUs always passes.
    """
    if req.gpus_per_unit <= 0:
        return
    matching = [n for n in nodes if req.accelerator_type in (None, n.accelerator_type)]
    offered = ", ".join(f"{n.count} × {n.gpus:g} {n.accelerator_type or 'GPU'}" for n in nodes) or "no GPU node"
    if not matching:
        raise PlacementError(
            f"{req.describe()}, but the cluster has no {req.accelerator_type or ''} GPU node (it offers: {offered}); "
            "declare the autoscaler's GPU groups in cluster.gpu_nodes or change the accelerator type"
        )
    big = [n for n in matching if n.gpus >= req.gpus_per_unit]
    if not big:
        most = max(n.gpus for n in matching)
        raise PlacementError(
            f"{req.describe()}, but its nodes have at most {most:g} GPU(s) (it offers: {offered}); "
            f"lower the GPUs per unit (tensor parallel size) to ≤ {most:g} or add nodes with more GPUs"
        )
    capacity = sum(int(n.gpus // req.gpus_per_unit) * n.count for n in big)
    if req.units > capacity:
        raise PlacementError(
            f"{req.describe()}, but at most {capacity} unit(s) fit on its nodes ({offered}); "
            f"lower the replicas/actors/workers to ≤ {capacity} or raise the groups' max nodes"
        )


def config_gpu_requests(cfg) -> list[GpuRequest]:
    """The GPU requests an `ExperimentConfig` makes, stage by stage (those that ask for GPUs)."""
    reqs = []
    sc = cfg.scorer
    if sc.oracle.backend == "vllm":
        v = sc.oracle.vllm
        reqs.append(GpuRequest("scorer.oracle.vllm", v.tensor_parallel_size, v.replicas, v.accelerator_type))
    if sc.scoring.actor_gpus > 0:
        reqs.append(GpuRequest("scorer.scoring", sc.scoring.actor_gpus, sc.scoring.actors_max,
                               sc.scoring.actor_accelerator_type))
    gpus = cfg.cluster.train_gpus_per_worker
    if gpus is None and cfg.train.device == "cuda":
        gpus = 1.0
    if gpus:
        reqs.append(GpuRequest("train (cluster.train_gpus_per_worker)", gpus, cfg.train.workers,
                               cfg.cluster.train_accelerator_type))
    return reqs
