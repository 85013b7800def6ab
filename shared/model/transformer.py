"""MoETransformer: decoder-only LM with RMSNorm pre-norm blocks, per-layer attention and MoE FFNs.

Layer i uses the attention kind `cfg.attention_kind(i)` (built by `shared.model.attention`'s
registry, RoPE inside) and, for `ffn: moe`, a dense SwiGLU for i < first_k_dense and a `MoELayer`
after; `ffn: dense` makes every FFN a SwiGLU as wide as the MoE's active experts (the dense twin).
The model knows nothing of distribution or precision policy.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from shared.config.model import ModelConfig
from shared.kernels import cpu_gemm
from shared.kernels.linear_cross_entropy import linear_cross_entropy
from shared.model.attention import build_attention
from shared.model.ffn import SwiGLU
from shared.model.moe import MoELayer
from shared.model.mup import (
    ParamScaling,
    embedding_multiplier,
    init_weights,
    logit_multiplier,
    param_scalings,
)
from shared.model.norm import RMSNorm
from shared.precision.experts import apply_precision


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = build_attention(cfg, layer_idx)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.is_moe = cfg.ffn == "moe" and layer_idx >= cfg.first_k_dense
        self.ffn = MoELayer(cfg.d_model, cfg.moe) if self.is_moe else SwiGLU(cfg.d_model, cfg.resolved_dense_hidden)

    def forward(self, x_BTD: Tensor) -> tuple[Tensor, dict[str, Tensor] | None]:
        x_BTD = x_BTD + self.attn(self.attn_norm(x_BTD))
        if self.is_moe:
            y_BTD, stats = self.ffn(self.ffn_norm(x_BTD))
            return x_BTD + y_BTD, stats
        return x_BTD + self.ffn(self.ffn_norm(x_BTD)), None


class MoETransformer(nn.Module):
    """`forward(tokens_BT) -> (logits_BTV, aux)`.

    aux = {"layers": {layer index: router stats of that MoE layer}, "aux_loss": Σ scaled aux
    losses (add it to the LM loss)}. After each optimizer step call `update_router_biases()`.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.emb_mult = embedding_multiplier(cfg)
        self.logit_mult = logit_multiplier(cfg)
        # muP facts per parameter, by name; kept as plain data so wrapped/sharded copies still find them
        self.mup_scalings: dict[str, ParamScaling] = param_scalings(self, cfg)
        init_weights(self, cfg, self.mup_scalings)
        apply_precision(self, cfg.moe.precision)  # number formats of expert and dense GEMMs

    def forward(self, tokens_BT: Tensor, targets_BT: Tensor | None = None) -> tuple[Tensor | None, dict]:
        """Logits and aux; with `targets_BT`, the mean next-token cross-entropy instead of the logits.

        With targets the head and the loss run fused (`shared.kernels.linear_cross_entropy`): no
        B·T×V logits tensor is made, and logits come back as None, the loss as `aux["lm_loss"]`.
        Training steps pass targets (it is also the cheaper path); callers that need logits do not.
        """
        x_BTD = self.tok_embeddings(tokens_BT) * self.emb_mult
        layer_stats: dict[int, dict[str, Tensor]] = {}
        aux_loss = torch.zeros((), device=tokens_BT.device)
        for i, block in enumerate(self.layers):
            x_BTD, stats = block(x_BTD)
            if stats is not None:
                aux_loss = aux_loss + stats.pop("aux_loss")
                layer_stats[i] = stats
        # the muP output multiplier on the D-wide hidden state, not the V-wide logits (same product, a
        # vocab/width times cheaper), and there folded into the final norm's gain: no pass of its own
        h_BTD = self.norm(x_BTD, scale=self.logit_mult)
        head_VD = self.tok_embeddings.weight if self.lm_head is None else self.lm_head.weight
        aux = {"layers": layer_stats, "aux_loss": aux_loss}
        if targets_BT is not None:
            aux["lm_loss"] = linear_cross_entropy(h_BTD.reshape(-1, h_BTD.shape[-1]), head_VD.to(h_BTD.dtype),
                                                  targets_BT.reshape(-1))
            return None, aux
        return cpu_gemm.linear(h_BTD, head_VD.to(h_BTD.dtype)), aux

    def moe_layers(self) -> list[MoELayer]:
        return [b.ffn for b in self.layers if b.is_moe]

    def set_full_stats(self, on: bool) -> None:
        """Every router statistic in the next forwards (on), or only those a trainer reads on every
        step (off; see `MoELayer.full_stats`): a trainer turns it on for the steps it logs."""
        for layer in self.moe_layers():
            layer.full_stats = on

    @torch.no_grad()
    def update_router_biases(self, tokens: float | None = None) -> None:
        """Aux-loss-free balancing step for every MoE layer, from loads accumulated since the last call
        over `tokens` tokens (None: counted from the loads; see `MoELayer.update_bias`)."""
        for layer in self.moe_layers():
            layer.update_bias(tokens)

    def lr_multipliers(self) -> dict[str, float]:
        """Adam-family muP LR multiplier per parameter name (Muon's are in shared.optim.scaling)."""
        return {name: s.adam_lr_multiplier for name, s in self.mup_scalings.items()}
