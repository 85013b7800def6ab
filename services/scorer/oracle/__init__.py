"""Oracle backends that label documents with a rubric: vllm, openai, heuristic (CPU stand-in).

`BACKENDS` maps `scorer.oracle.backend` to the module and class that implement it; each class
builds itself from its own config section (`scorer.oracle.<backend>`) with `from_config`.
Modules are imported only when chosen, so the CPU path never imports vLLM or httpx clients.
"""

from __future__ import annotations

import importlib

from services.scorer.oracle.base import Oracle, OracleRequest

BACKENDS: dict[str, tuple[str, str]] = {
    "heuristic": ("services.scorer.oracle.heuristic", "HeuristicOracle"),
    "openai": ("services.scorer.oracle.openai_backend", "OpenAIOracle"),
    "vllm": ("services.scorer.oracle.vllm_backend", "VLLMOracle"),
}


def make_oracle(cfg) -> Oracle:
    """Build the backend named by `scorer.oracle.backend` from its section `scorer.oracle.<backend>`."""
    if cfg.backend not in BACKENDS:
        raise ValueError(f"scorer.oracle.backend={cfg.backend!r} is not one of {', '.join(sorted(BACKENDS))}")
    module, cls = BACKENDS[cfg.backend]
    return getattr(importlib.import_module(module), cls).from_config(cfg.backend_section())


__all__ = ["BACKENDS", "Oracle", "OracleRequest", "make_oracle"]
