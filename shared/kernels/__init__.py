"""Expert dispatch kernels: permute → grouped GEMM → unpermute, backends loop | grouped_mm | triton."""

from shared.kernels.dispatch import (
    GroupedMM,
    Routing,
    expert_swiglu,
    moe_experts_forward,
    permute,
    route_by_expert,
    slot_weights,
    unpermute_combine,
    unpermute_sum,
)
from shared.kernels.grouped_mm import BACKENDS, grouped_mm, resolve_backend

__all__ = [
    "BACKENDS",
    "GroupedMM",
    "Routing",
    "expert_swiglu",
    "grouped_mm",
    "moe_experts_forward",
    "permute",
    "resolve_backend",
    "route_by_expert",
    "slot_weights",
    "unpermute_combine",
    "unpermute_sum",
]
