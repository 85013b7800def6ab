"""DeepSeek-V3-style MoE layer: shared experts + fine-grained routed experts, dropless by default.

y = shared(x') + Σ_k w_k · expert_{i_k}(x'), with the bungee scalar on x' or on y (see `MoELayer`).
The layer returns its output and a dict of router statistics (all of them, or with `full_stats`
off only the loads, entropy and drops the trainer reads every step); its aux losses (already
scaled by their coefficients, and computed only when the coefficient is not 0 or full statistics
report them) are in `stats["aux_loss"]`, and the loads seen while training are summed into
`load_accum_E` for the aux-loss-free bias update applied by `update_bias()` after each optimizer
step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from shared.kernels.histogram import expert_histogram
from shared.model.balance import bias_update_, router_z_loss, seq_aux_loss, switch_aux_loss
from shared.model.experts import RoutedExperts
from shared.model.ffn import SwiGLU
from shared.model.router import Router, RouterOutput
from shared.model.stats import router_stats, step_stats

if TYPE_CHECKING:
    from shared.config.model import MoEConfig


class MoELayer(nn.Module):
    """Routed + shared SwiGLU experts with a learnable "bungee" scalar.

    The bungee scalar, our reading of the Kaiju-style recipe ("a single scalar at the output of the
    experts' pre-output norm, initialised at 2.0"), placed by `bungee.placement`:
    - `input`: the block's pre-FFN RMSNorm output is multiplied by the scalar for the experts
      (x' = b·x), so experts start with a larger-than-unit input and can pull it back, without
      touching the residual stream's scale. The router reads the unscaled x: scaled, its logits
      shrank with b, and where training drove b through zero (one layer of three 3,000-step runs
      of the precision experiment) every token got the same scores, the bias alone chose the
      experts and all tokens went to the same four;
    - `output`: the combined expert output is multiplied by it (y = b·(shared + routed)), the
      scalar then sets how loudly the MoE writes into the residual stream.
    RMSNorm's per-channel gain is optimised like any vector; the scalar moves the whole thing as one.
    With `bungee: false` the scalar is absent.
    """

    def __init__(self, d_model: int, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = Router(d_model, cfg)
        self.experts = RoutedExperts(cfg.n_routed_experts, d_model, cfg.expert_hidden, cfg.dispatch_backend)
        self.shared = SwiGLU(d_model, cfg.n_shared_experts * cfg.expert_hidden) if cfg.n_shared_experts else None
        self.bungee = nn.Parameter(torch.tensor(float(cfg.bungee.init))) if cfg.bungee.enabled else None
        self.register_buffer("load_accum_E", torch.zeros(cfg.n_routed_experts, dtype=torch.float32), persistent=False)
        # Every statistic in every forward (True), or only what the trainer reads on every step (False:
        # `shared.model.stats.step_stats`); a trainer sets it per step (`set_full_stats`), on for
        # the steps it logs.
        self.full_stats = True

    def capacity(self, n_tokens: int) -> int | None:
        """Per-expert capacity: ceil(capacity_factor · T·K / E), or None when dropless."""
        cf = self.cfg.capacity_factor
        if cf is None:
            return None
        return max(1, math.ceil(cf * n_tokens * self.cfg.top_k / self.cfg.n_routed_experts))

    def forward(self, x_BTD: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        cfg = self.cfg
        B, T, D = x_BTD.shape
        scale_input = self.bungee is not None and cfg.bungee.placement == "input"
        r = self.router(x_BTD.reshape(B * T, D))  # the unscaled input (see the class docstring)
        if scale_input:
            x_BTD = x_BTD * self.bungee.to(x_BTD.dtype)
        x_ND = x_BTD.reshape(B * T, D)
        routed_ND, routing = self.experts(x_ND, r.idx_TK, r.weights_TK, self.capacity(B * T))
        y_ND = routed_ND if self.shared is None else routed_ND + self.shared(x_ND)
        if self.bungee is not None and not scale_input:
            y_ND = y_ND * self.bungee.to(y_ND.dtype)
        E, bal = cfg.n_routed_experts, cfg.balance
        load_E = expert_histogram(r.idx_TK, E)  # no host sync (shared.kernels.histogram)
        if self.training:
            self.load_accum_E += load_E.to(self.load_accum_E.dtype)
        coefs = {"seq_aux_loss": bal.seq_aux_alpha, "switch_aux_loss": bal.switch_aux_alpha, "z_loss": bal.z_loss_coef}
        # a loss at coefficient 0 adds nothing: computed only when full statistics report its value
        losses = {name: self._aux_loss(name, r, B, T) for name, c in coefs.items() if c > 0 or self.full_stats}
        aux = sum((losses[k] * c for k, c in coefs.items() if c > 0), torch.zeros((), device=x_BTD.device))
        if self.full_stats:
            stats = router_stats(load_E, r.scores_TE, self.router.expert_bias_E, losses, routing.dropped)
        else:
            stats = step_stats(load_E, r.scores_TE, routing.dropped)
        stats["aux_loss"] = aux
        return y_ND.view(B, T, D), stats

    def _aux_loss(self, name: str, r: RouterOutput, B: int, T: int) -> Tensor:
        E = self.cfg.n_routed_experts
        if name == "seq_aux_loss":
            return seq_aux_loss(r.scores_TE.view(B, T, E), r.idx_TK.view(B, T, -1), E)
        if name == "switch_aux_loss":
            return switch_aux_loss(r.scores_TE, r.idx_TK, E)
        return router_z_loss(r.logits_TE)

    @torch.no_grad()
    def update_bias(self, tokens: float | None = None) -> None:
        """Aux-loss-free bias step (`balance.bias_update_rule`) from loads since the last call; resets them
        and folds the new bias into the average that eval mode may route with, weighted by `tokens`,
        the tokens behind this update. Without it they are counted from the loads, which a forward
        recomputed under activation checkpointing adds twice (the bias step is scale-free; the
        average's weight is not), so a trainer that recomputes passes the count it knows."""
        bal = self.cfg.balance
        bias_update_(self.router.expert_bias_E, self.load_accum_E, bal.bias_update_rate, bal.bias_update_rule)
        self.router.average_bias(self.load_accum_E.sum() / self.cfg.top_k if tokens is None else tokens)
        self.load_accum_E.zero_()
