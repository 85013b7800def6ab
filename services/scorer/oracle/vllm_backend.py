"""Oracle on Ray Data with vLLM engines (`ray.data.llm`), for labelling at cluster scale on GPUs.

Each engine replica holds the oracle (default `openai/gpt-oss-120b`) with the configured tensor
parallel size; Ray Data streams prompts through `concurrency` replicas in batches. The rubric's
JSON schema is passed per row as `sampling_params.structured_outputs.json`, so vLLM decodes only
schema-valid JSON (validation and retries still run in `labeling`, which never trusts a backend).
Needs vLLM and a GPU; on CPU use the `openai` backend against `vllm serve` (see docs/scorer.md).
"""

from __future__ import annotations

import json

from services.scorer.oracle.base import Oracle, OracleRequest


class VLLMOracle(Oracle):
    name = "vllm"

    def __init__(self, model: str, *, tensor_parallel_size: int, concurrency: int, batch_size: int,
                 max_tokens: int, temperature: float) -> None:
        super().__init__()
        self.model = model
        self.tp = tensor_parallel_size
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.temperature = temperature

    @classmethod
    def from_config(cls, cfg) -> VLLMOracle:
        return cls(cfg.model, tensor_parallel_size=cfg.tensor_parallel_size, concurrency=cfg.concurrency,
                   batch_size=cfg.batch_size, max_tokens=cfg.max_tokens, temperature=cfg.temperature)

    def processor_config(self):
        from ray.data.llm import vLLMEngineProcessorConfig

        return vLLMEngineProcessorConfig(
            model_source=self.model,
            engine_kwargs={"tensor_parallel_size": self.tp, "max_model_len": 16384},
            concurrency=self.concurrency,
            batch_size=self.batch_size,
        )

    def _answer(self, requests: list[OracleRequest]) -> list[str]:
        import ray
        from ray.data.llm import build_processor

        max_tokens, temperature = self.max_tokens, self.temperature
        processor = build_processor(
            self.processor_config(),
            preprocess=lambda row: dict(
                messages=[{"role": "user", "content": row["prompt"]}],
                sampling_params=dict(
                    temperature=temperature,
                    max_tokens=max_tokens,
                    structured_outputs={"json": row["schema_json"]},
                ),
            ),
            postprocess=lambda row: dict(idx=row["idx"], answer=row["generated_text"]),
        )
        rows = [{"idx": i, "prompt": r.prompt, "schema_json": json.dumps(r.schema)} for i, r in enumerate(requests)]
        out = processor(ray.data.from_items(rows)).take_all()
        answers = {int(r["idx"]): str(r["answer"]) for r in out}
        return [answers.get(i, "<error> vLLM returned no row for this request") for i in range(len(requests))]
