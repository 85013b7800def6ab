"""Token-choice top-k router in the DeepSeek-V3 style, computed in fp32.

scores = softmax or sigmoid of x·W_rᵀ; selection uses scores + bias (the aux-loss-free balancing
bias, a checkpointed buffer that never receives gradients); the combine weights are the *unbiased*
scores of the chosen experts, optionally renormalised to sum to 1 and multiplied by `route_scale`.
In eval mode the selection may use the eval-time bias instead (`balance.eval_bias`): a bias updated
after every small micro-batch swings with the last batches it saw, and the balance it keeps in
training comes from that feedback, which a frozen model no longer has. The eval-time bias buffer
holds the bias's moving average, or, once a checkpoint is calibrated (`moelab router calibrate`),
the bias re-solved on the frozen model; training never routes with it.
Group-limited routing (DeepSeek-V3 §2.1.2): experts are split into `n_groups`; a group's score is
the sum of its two highest (biased) scores; each token may only pick experts from its best
`topk_groups` groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from shared.config.model import MoEConfig


@dataclass
class RouterOutput:
    idx_TK: Tensor  # chosen experts
    weights_TK: Tensor  # combine weights (fp32)
    scores_TE: Tensor  # unbiased scores (fp32), for aux losses and stats
    logits_TE: Tensor  # pre-activation logits (fp32), for the z-loss


class Router(nn.Module):
    def __init__(self, d_model: int, cfg: MoEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        E = cfg.n_routed_experts
        self.weight_ED = nn.Parameter(torch.empty(E, d_model))
        nn.init.normal_(self.weight_ED, std=d_model**-0.5)
        # Checkpointed; updated by `bias_update_` after optimizer steps, never by gradients.
        self.register_buffer("expert_bias_E", torch.zeros(E, dtype=torch.float32))
        # Its exponential moving average over the tokens behind the updates (`balance.bias_average_tokens`).
        self.register_buffer("expert_bias_avg_E", torch.zeros(E, dtype=torch.float32))

    def _apply(self, fn, recurse=True):
        """Keep the biases fp32 through `.to(bfloat16)`/`.half()`: γ = 1e-3 steps vanish in bf16."""
        super()._apply(fn, recurse)
        self.expert_bias_E = self.expert_bias_E.float()
        self.expert_bias_avg_E = self.expert_bias_avg_E.float()
        return self

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A state dict saved before the router kept a bias average loads with the average set to its bias."""
        bias, avg = prefix + "expert_bias_E", prefix + "expert_bias_avg_E"
        if bias in state_dict and avg not in state_dict:
            state_dict[avg] = state_dict[bias].clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def selection_bias(self) -> Tensor:
        """The bias added to the scores for top-k: the live one in training, `balance.eval_bias`'s in eval mode."""
        if self.training or self.cfg.balance.eval_bias == "live":
            return self.expert_bias_E
        return self.expert_bias_avg_E

    @torch.no_grad()
    def average_bias(self, tokens: Tensor | float) -> None:
        """Fold the bias just updated from `tokens` routed tokens (a number, or a 0-dim tensor: no device
        sync) into its moving average."""
        horizon = self.cfg.balance.bias_average_tokens
        if isinstance(tokens, Tensor):
            decay = torch.exp(-tokens.float() / horizon)
            self.expert_bias_avg_E.mul_(decay).add_((1.0 - decay) * self.expert_bias_E)
        else:  # the trainer's count: a Python number, no tensor made per update
            decay = math.exp(-tokens / horizon)
            self.expert_bias_avg_E.mul_(decay).add_(self.expert_bias_E, alpha=1.0 - decay)

    def forward(self, x_TD: Tensor) -> RouterOutput:
        cfg = self.cfg
        logits_TE = F.linear(x_TD.float(), self.weight_ED.float())
        scores_TE = logits_TE.sigmoid() if cfg.score_func == "sigmoid" else logits_TE.softmax(-1)
        idx_TK = self.select(scores_TE.detach(), self.selection_bias())
        weights_TK = scores_TE.gather(1, idx_TK)
        if cfg.norm_topk_prob and cfg.top_k > 1:
            weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True).clamp_min(1e-20)
        return RouterOutput(idx_TK, weights_TK * cfg.route_scale, scores_TE, logits_TE)

    def select(self, scores_TE: Tensor, bias_E: Tensor) -> Tensor:
        """The top-k experts of each token for scores + bias (group-limited where configured): the
        router's selection, callable on recorded scores to ask what another bias would route."""
        select_TE = scores_TE + bias_E
        if self.cfg.n_groups > 1:
            select_TE = self._limit_groups(select_TE)
        return select_TE.topk(self.cfg.top_k, dim=-1, sorted=False).indices

    def _limit_groups(self, select_TE: Tensor) -> Tensor:
        cfg = self.cfg
        T, E = select_TE.shape
        grouped_TGe = select_TE.view(T, cfg.n_groups, E // cfg.n_groups)
        top = min(2, grouped_TGe.shape[-1])
        group_score_TG = grouped_TGe.topk(top, dim=-1).values.sum(-1)
        keep_TG = torch.zeros_like(group_score_TG, dtype=torch.bool)
        keep_TG.scatter_(1, group_score_TG.topk(cfg.topk_groups, dim=-1).indices, True)
        return grouped_TGe.masked_fill(~keep_TG[..., None], float("-inf")).view(T, E)
