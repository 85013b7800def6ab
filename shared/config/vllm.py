"""The vLLM oracle's section (`scorer.oracle.vllm`): the model and how it answers (`OracleModelSection`),
the engine shape and where its replicas run.

Why its own section: tensor parallelism × replicas is a placement decision, validated against the
cluster's GPU nodes (`shared.placement`) before the label stage starts — a TP-8 engine cannot be
placed on a 1-GPU node, and Ray would otherwise wait for it forever. The defaults (TP 1, one
replica) fit any single GPU; the cluster recipe (configs/cluster-16b4a.yaml) sizes them to its
nodes. `ray.data.llm` builds one vLLM engine per replica, each on `tensor_parallel_size` GPUs of
one node (a placement group packed onto a node) carrying `accelerator_type` when set.
"""

from __future__ import annotations

from pydantic import Field

from shared.config.oracle_model import OracleModelSection


class VLLMOracleConfig(OracleModelSection):
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per vLLM engine (tensor parallel); all on one node.")
    replicas: int = Field(1, ge=1, le=1024, description="vLLM engine replicas Ray Data streams prompts through.")
    accelerator_type: str | None = Field(
        None, min_length=1, description="Ray accelerator type the engines need (e.g. H100, L40S); None = any GPU."
    )
    batch_size: int = Field(64, ge=1, le=4096, description="Documents per Ray Data batch sent to one vLLM engine.")
    max_model_len: int = Field(16384, ge=256, le=1_048_576, description="vLLM context length (prompt + answer tokens).")
    dtype: str = Field("auto", min_length=1, description="vLLM weight/activation dtype (auto = the checkpoint's).")
