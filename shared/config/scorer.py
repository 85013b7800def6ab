"""Scorer section: oracle labelling, the Probe/Judge heads and their calibration."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config.base import Section


class OracleConfig(Section):
    backend: Literal["vllm", "openai", "heuristic"] = Field(
        "heuristic", description="vllm (Ray Data + vLLM), openai (any compatible endpoint), heuristic (CPU demo stand-in)."
    )
    model: str = Field("openai/gpt-oss-120b", description="Oracle model name or path.")
    sample_size: int = Field(2000, ge=1, description="Documents labelled by the oracle.")


class ScorerConfig(Section):
    oracle: OracleConfig = Field(default_factory=OracleConfig, description="Oracle labeller.")
    backbone: str = Field("minilm", description="Frozen backbone: 'minilm' (shipped, CPU) or a local Hugging Face model path.")
    out_dir: str = Field("runs/scorer", description="Directory for labels, cached hidden states, heads and scores.")
