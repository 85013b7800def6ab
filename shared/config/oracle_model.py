"""What every language-model oracle is asked the same way, whichever backend serves it.

Why one base section: the model, the answer budget, the sampling temperature and the structured-output
constraint mean the same thing to a vLLM engine the label stage starts (`scorer.oracle.vllm`) and to
an OpenAI-compatible endpoint it calls (`scorer.oracle.openai`); each backend's section adds only how
it is reached or placed. The defaults are the production oracle (gpt-oss-120b), greedy, answering in
the rubric's JSON schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config.base import Section


class OracleModelSection(Section):
    model: str = Field(
        "openai/gpt-oss-120b", description="Oracle model: the name the endpoint serves, or the name/path the vLLM engines load."
    )
    max_tokens: int = Field(512, ge=16, le=32768, description="Maximum tokens the oracle may generate per answer.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of the oracle (0 = greedy).")
    constraint: Literal["json_schema", "vllm_regex"] = Field(
        "json_schema",
        description="Structured output: the rubric's JSON schema, or vLLM's regex built from it (compact JSON in key order).",
    )
