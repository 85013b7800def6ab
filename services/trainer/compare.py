"""MoE vs its dense twin on the same data and infrastructure (the comparison the MoE handbook asks for).

The dense twin is the same config with `model.ffn: dense`, whose SwiGLU width matches the MoE's
*active* parameters, so the two differ only in sparsity. Each run gets its own process (fresh
peak-memory counters) and its own run directory; both read the same token shards in the same
order (same seed and mixture), so losses at equal tokens are directly comparable.
"""

from __future__ import annotations

from typing import Any

from services.trainer.launch import spawn_local
from shared.config import ExperimentConfig


def dense_twin(cfg: ExperimentConfig) -> ExperimentConfig:
    model = cfg.model.model_copy(update={"ffn": "dense"})
    train = cfg.train.model_copy(update={"run_name": f"{cfg.train.run_name or cfg.name}-dense"})
    return cfg.model_copy(update={"model": model, "train": train})


def compare_baseline(cfg: ExperimentConfig) -> dict[str, Any]:
    """Train `cfg` (MoE) and its dense twin; return both runs' final metrics side by side."""
    moe_cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_name": cfg.train.run_name or cfg.name})})
    results = {"moe": spawn_local(moe_cfg), "dense": spawn_local(dense_twin(cfg))}
    keys = ("loss", "eval/loss", "tokens", "tokens_per_s", "memory_gib", "total_params", "active_params", "mfu")
    return {name: {k: res.get(k) for k in keys} for name, res in results.items()}


def format_comparison(table: dict[str, dict[str, Any]]) -> str:
    rows = ["metric".ljust(16) + "moe".rjust(16) + "dense".rjust(16)]
    for key in table["moe"]:
        cells = []
        for name in ("moe", "dense"):
            v = table[name][key]
            cells.append("-" if v is None else f"{v:,.4g}" if isinstance(v, float) else f"{v:,}")
        rows.append(key.ljust(16) + "".join(c.rjust(16) for c in cells))
    return "\n".join(rows)
