"""The MoE transformer a researcher trains: `MoETransformer(cfg)`, its MoE layer, accounting, muP."""

from shared.model.accounting import ParamCounts, count_params, flops_per_token
from shared.model.moe import MoELayer
from shared.model.stats import summarize
from shared.model.transformer import MoETransformer

__all__ = ["MoELayer", "MoETransformer", "ParamCounts", "count_params", "flops_per_token", "summarize"]
