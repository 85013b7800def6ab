"""Delayed per-tensor fp8 scaling: transformer-engine's `DelayedScaling` recipe, emulated.

With delayed scaling a tensor is cast with a scale computed *before* it is seen: from the amax
history of that GEMM operand over earlier steps (Micikevicius et al. 2022, "FP8 formats for deep
learning"; TE's default fp8 recipe before current scaling). TE's rules (checked against
`transformer_engine.pytorch.quantization` and `common.recipe.DelayedScaling`, TE 2.19):

- every GEMM operand (input X, weight W, gradient dY; per GEMM of a grouped GEMM) keeps an amax
  history of `amax_history_len` steps (default 1024) and a scale, initially 1;
- the scale used at step t is `fp8_max / amax / 2^margin`, where amax is the max of the history
  (`amax_compute_algo="max"`) or its newest entry (`"most_recent"`) over steps < t; when that
  amax is 0 or not finite the previous scale is kept;
- the cast is `saturate(round(x · scale))`: a tensor larger than the stale scale allows clamps to
  ±fp8_max instead of overflowing to inf/nan; then x's own amax enters the history (the history
  rolls: the oldest entry drops out).

`DelayedScalingState` holds the history and the scales as module buffers, so they are saved with
every checkpoint (state_dict / DCP) like TE's `_extra_state`. A forward under `torch.no_grad()`
(evaluation) uses the scale the history gives but does not change the state (TE reduces forward
amaxes only when grad is enabled); a forward recomputed inside backward (activation
checkpointing) reuses the scale of the original forward, as TE's recompute path does. Under data
parallelism the trainer max-reduces the newly pushed history rows over the ranks after each step
(`reduce_amax_`), so every rank keeps the same history and scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from shared.precision.formats import FloatFormat, round_to_format

ROLES = {"x": 0, "w": 1, "grad": 2}
UpdateMode = Literal["train", "eval", "recompute"]


@dataclass(frozen=True)
class DelayedParams:
    """TE `DelayedScaling` knobs: history length, amax algorithm, margin."""

    history_len: int = 1024
    algo: Literal["max", "most_recent"] = "max"
    margin: int = 0


def forward_update_mode() -> UpdateMode:
    """How a forward pass may touch delayed-scaling state: train (update), eval, or recompute."""
    if torch._C._current_graph_task_id() != -1:  # running inside backward: activation recompute
        return "recompute"
    return "train" if torch.is_grad_enabled() else "eval"


class DelayedScalingState(nn.Module):
    """Amax history (history_len, 3, groups) and scales (3, groups) of one GEMM site's X, W, dY.

    `groups` is the number of GEMMs sharing the site (the experts of a grouped GEMM, 1 for a linear
    layer); each has its own history and scale, as TE's `GroupedLinear` keeps per-GEMM fp8 meta.
    Scales follow TE's convention: the fp8 value is x · scale, dequantised by 1 / scale.
    """

    def __init__(self, groups: int, params: DelayedParams) -> None:
        super().__init__()
        self.params = params
        self.register_buffer("amax_history", torch.zeros(params.history_len, len(ROLES), groups))
        self.register_buffer("scale", torch.ones(len(ROLES), groups))
        self.unreduced = 0  # history rows pushed since the last `reduce_amax_` (the most of any role)
        self._pushed = [0] * len(ROLES)

    @torch.no_grad()
    def reduce_amax_(self, group=None) -> None:
        """Max-reduce the history rows pushed since the last call over `group`'s ranks.

        Data-parallel ranks see different activations and gradients, so their amaxes differ; TE
        reduces them (`reduce_amax`) so every rank derives the same scale. Only the new rows
        travel: older rows are already equal everywhere. Every rank of the group must call this
        after the same forward/backward passes, as with any collective.
        """
        import torch.distributed as dist

        n = min(self.unreduced, self.params.history_len)
        if n and dist.is_initialized() and dist.get_world_size(group) > 1:
            dist.all_reduce(self.amax_history[:n], op=dist.ReduceOp.MAX, group=group)
        self.unreduced, self._pushed = 0, [0] * len(ROLES)

    def scale_from_history(self, role: int, fmt: FloatFormat) -> torch.Tensor:
        """The scale the history gives now (steps < t), per group; keeps the old scale where amax is 0."""
        hist = self.amax_history[:, role]
        amax = hist.amax(0) if self.params.algo == "max" else hist[0]
        new = fmt.max / torch.where(amax > 0, amax, 1.0) / 2.0**self.params.margin
        return torch.where((amax > 0) & torch.isfinite(amax), new, self.scale[role])

    def step_scale(self, role_name: str, t: torch.Tensor, fmt: FloatFormat, mode: UpdateMode) -> torch.Tensor:
        """The scale (groups,) to cast t (groups, rows, cols) with; in `train` mode t's amax then enters
        the history. Shared by the emulation (`quantize`) and the native fp8 GEMMs, which cast with it."""
        role = ROLES[role_name]
        if t.shape[0] != self.scale.shape[1]:
            raise ValueError(f"delayed-scaling state has {self.scale.shape[1]} groups, the GEMM has {t.shape[0]}")
        if mode == "recompute":
            scale = self.scale[role]
        else:
            scale = self.scale_from_history(role, fmt)
        if mode == "train":
            self.scale[role] = scale
            amax = t.detach().abs().amax(dim=(1, 2)).float() if t.numel() else torch.zeros_like(scale)
            self.amax_history[:, role] = torch.cat([amax[None], self.amax_history[:-1, role]])
            self._pushed[role] += 1
            self.unreduced = max(self._pushed)
        return scale

    def quantize(self, role_name: str, t: torch.Tensor, fmt: FloatFormat, mode: UpdateMode) -> torch.Tensor:
        """Quantise → dequantise t (groups, rows, cols) with each group's delayed scale; fp32 result."""
        t = t.float()
        s = self.step_scale(role_name, t, fmt, mode)[:, None, None]
        return round_to_format(t * s, fmt) / s  # round_to_format saturates at ±fmt.max
