"""Driver for the GPU-placement test: the whole pipeline as a Ray job on a head + one GPU node.

Run as `python placement_driver.py WORK_DIR MARKER_DIR` with RAY_ADDRESS set (as `ray job
submit` sets it for a job's driver). The config is the pipeline test's small demo slice with the
GPU stages placed as on a cluster: scoring actors ask for one GPU of accelerator type H100, the
training worker for one GPU (torch computes on the CPU: the GPU is declared, not real), and
`cluster.gpu_nodes` declares the node group. The scorer's actor class is the real one,
subclassed only to leave a marker (node id and pid) from inside each actor, and the training
metrics carry the node the worker ran on. A second config (a TP-2 vLLM oracle) must be refused
before its stage starts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(work: str, markers: str) -> None:
    import ray

    from cluster import pipeline
    from services.scorer import scoring
    from shared.placement import PlacementError
    from tests.cluster.conftest import GPU_NODE_ACCELERATOR as ACCEL
    from tests.cluster.test_pipeline import _config

    class MarkedScorerActor(scoring.ScorerActor):
        def __call__(self, batch):
            path = os.path.join(markers, f"{ray.get_runtime_context().get_node_id()}-{os.getpid()}")
            with open(path, "a") as fh:
                fh.write(f"{batch.num_rows}\n")
            return super().__call__(batch)

    scoring.ScorerActor = MarkedScorerActor
    placed = [
        "scorer.scoring.actor_gpus=1", f"scorer.scoring.actor_accelerator_type={ACCEL}", "scorer.scoring.actors_min=1",
        "scorer.scoring.actors_max=1", "scorer.scoring.actor_cpus=0.5", "train.device=cpu",
        "cluster.train_gpus_per_worker=1", "cluster.train_cpus_per_worker=1", f"cluster.train_accelerator_type={ACCEL}",
        f"cluster.gpu_nodes=[{{accelerator_type: {ACCEL}, gpus_per_node: 1, max_nodes: 1}}]",
    ]
    tmp = Path(work)
    summary = pipeline.run_pipeline(_config(tmp, *placed), log=print)
    too_big = _config(tmp, "scorer.oracle.backend=vllm", "scorer.oracle.vllm.tensor_parallel_size=2")
    try:
        pipeline.check_placement(too_big, "scorer.oracle")
        refusal = None
    except PlacementError as exc:
        refusal = str(exc)
    out = tmp / "result.json"
    out.with_suffix(".tmp").write_text(json.dumps({"summary": summary, "refusal": refusal}, default=str))
    os.replace(out.with_suffix(".tmp"), out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
