"""Oracle backends that label documents with a rubric: vllm, openai, heuristic (CPU stand-in)."""

from __future__ import annotations

from services.scorer.oracle.base import Oracle, OracleRequest


def make_oracle(cfg) -> Oracle:
    """Build the backend named by `scorer.oracle.backend` (imports heavy clients only when chosen)."""
    if cfg.backend == "heuristic":
        from services.scorer.oracle.heuristic import HeuristicOracle

        return HeuristicOracle()
    if cfg.backend == "openai":
        from services.scorer.oracle.openai_backend import OpenAIOracle

        return OpenAIOracle.from_config(cfg)
    if cfg.backend == "vllm":
        from services.scorer.oracle.vllm_backend import VLLMOracle

        return VLLMOracle.from_config(cfg)
    raise ValueError(f"scorer.oracle.backend={cfg.backend!r} is not one of vllm, openai, heuristic")


__all__ = ["Oracle", "OracleRequest", "make_oracle"]
