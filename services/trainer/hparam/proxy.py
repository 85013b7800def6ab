"""Proxy configs: one base recipe scaled to another width, muP on or off, LR and token budget.

Width grows by heads at a fixed head width (muP's attention rule then needs no 1/d change,
Yang et al. 2022 §J) and the expert/dense FFN widths keep their ratio to d_model, so every hidden
matrix grows with the width. The muP base stays the recipe (the proxy that was tuned): its
`base_width`, and in `mup.base_shapes` the recipe's value of every other width that scaling
changes (unless the recipe already names a base for it), so each matrix's multipliers compare
its shape with the recipe's.
A token budget becomes a step count at the recipe's batch shape; warmup keeps its fraction of the
run so budgets differ only in length.
"""

from __future__ import annotations

from shared.config import ExperimentConfig
from shared.config.loader import validate


def tokens_per_step(cfg: ExperimentConfig) -> int:
    t = cfg.train
    return t.micro_batch_size * t.seq_len * t.grad_accum * t.workers


def steps_for_tokens(cfg: ExperimentConfig, tokens: int) -> int:
    """Optimizer steps that consume `tokens` (rounded, at least 2) at the recipe's batch shape."""
    return max(2, round(tokens / tokens_per_step(cfg)))


def width_update(cfg: ExperimentConfig, width: int) -> dict:
    """The model fields that change when the recipe's width becomes `width`."""
    m = cfg.model
    head_dim = m.resolved_head_dim
    if width % head_dim:
        raise ValueError(f"width {width} is not a multiple of the head width {head_dim} (model.head_dim); pick another width")
    n_heads = width // head_dim
    kv_ratio = m.n_heads // m.n_kv_heads
    n_kv = max(1, n_heads // kv_ratio)
    while n_heads % n_kv:
        n_kv -= 1
    scale = width / m.d_model
    upd = {"d_model": width, "head_dim": head_dim, "n_heads": n_heads, "n_kv_heads": n_kv,
           "moe": {"expert_hidden": max(1, round(m.moe.expert_hidden * scale))}}
    base_shapes = {"n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads, "moe.expert_hidden": m.moe.expert_hidden}
    if m.dense_hidden is not None:
        upd["dense_hidden"] = max(1, round(m.dense_hidden * scale))
        base_shapes["dense_hidden"] = m.dense_hidden
    if m.head_dim is None:  # the recipe's head width was d_model / n_heads; it is now fixed explicitly
        base_shapes["head_dim"] = head_dim
    upd["mup"] = {"base_shapes": {**base_shapes, **m.mup.base_shapes}}
    return upd


def _merge(base: dict, upd: dict) -> dict:
    out = dict(base)
    for k, v in upd.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def proxy_config(
    cfg: ExperimentConfig,
    width: int | None = None,
    mup: bool | None = None,
    lr: float | None = None,
    tokens: int | None = None,
) -> ExperimentConfig:
    """`cfg` at another width / muP setting / peak LR / token budget (None keeps the recipe's)."""
    data = cfg.model_dump(mode="json")
    if width is not None:
        data["model"] = _merge(data["model"], width_update(cfg, width))
    if mup is not None:
        data["model"]["mup"]["enabled"] = mup
    if lr is not None:
        data["optim"]["lr"] = lr
    if tokens is not None:
        steps = steps_for_tokens(cfg, tokens)
        frac = cfg.optim.warmup_steps / cfg.train.steps
        data["train"]["steps"] = steps
        data["optim"]["warmup_steps"] = min(steps - 1, round(frac * steps))
    return validate(data, source=f"proxy config (width={width}, mup={mup}, lr={lr}, tokens={tokens})")
