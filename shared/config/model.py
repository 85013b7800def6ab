"""Model section: the MoE transformer's shape, routing, balancing and stability knobs.

Defaults are the `tiny` CPU model; recipes in configs/ override them. The DeepSeek-V3 numbers
(γ = 1e-3 bias update, α = 1e-4 sequence aux loss) and the Kaiju-style multipliers (embedding
10.66, output logits 0.125, bungee scalar 2.0) are the published values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from shared.config.attention import ATTENTION_KINDS, AttentionConfig  # noqa: F401  (re-exported)
from shared.config.base import Section
from shared.config.precision import PrecisionConfig


class BalanceConfig(Section):
    bias_update_rate: float = Field(
        1e-3, ge=0.0, le=1.0, description="γ of aux-loss-free balancing: b_i += γ·sign(mean_load − load_i) per step (0 = off)."
    )
    bias_update_rule: Literal["sign", "error"] = Field(
        "sign", description="sign: b_i += γ·sign(mean − load_i) (DeepSeek-V3); error: b_i += γ·(mean − load_i)/mean, "
        "a step proportional to the relative load error (large when an expert is flooded, ~0 near balance).",
    )
    bias_update_every: Literal["step", "micro_batch"] = Field(
        "step", description="Apply the bias update after every optimizer step, or after every micro-batch's backward."
    )
    bias_update_window_tokens: int = Field(
        0, ge=0, le=1 << 30, description="0: the bias moves after every update (`bias_update_every`) from that update's "
        "loads. N: loads are summed over updates until they cover at least N routed tokens, then the bias takes one "
        "step from the sum, as a batch of N tokens would give it (a step chasing each single sequence is what leaves "
        "a frozen router unbalanced). Must cover at least one update's tokens.",
    )
    router_lr_cooldown: float = Field(
        0.0, ge=0.0, le=0.5, description="Fraction of the final optimizer steps over which the router's learning "
        "rate falls linearly to 0 (0 = off): the router stops drifting while the bias keeps balancing it, so the "
        "bias a run ends with fits the router it ends with.",
    )
    eval_bias: Literal["live", "average"] = Field(
        "average", description="The bias the router selects with in eval mode (held-out evals, inference). live: the bias "
        "as last updated; average: its exponential moving average over bias updates, which leaves out the swing "
        "of a bias that chases each micro-batch (a snapshot of it routes a frozen model out of balance).",
    )
    bias_average_tokens: int = Field(
        16384, ge=1, description="Horizon of the `average` eval bias in routed tokens: a bias update after n tokens "
        "weighs the new bias by 1 − exp(−n / horizon), so the average spans the same data whether the bias moves "
        "after every micro-batch or every step.",
    )
    calibrate_at_end: bool = Field(
        False, description="After the last step, re-solve each layer's eval-time bias on the frozen model over "
        "`calibration_tokens` unseen training-stream tokens (moelab router calibrate) and save it in the final "
        "checkpoint; training tensors and optimizer state stay as trained. Needs eval_bias=average.",
    )
    calibration_tokens: int = Field(
        262144, ge=65536, le=1 << 30, description="Training-stream tokens the end-of-run calibration solves the bias on "
        "(fewer than 65,536 fit the sample, not the mixture; on tiny, 262,144 left the frozen router nearer its floor "
        "than 131,072: docs/moe.md).",
    )
    seq_aux_alpha: float = Field(1e-4, ge=0.0, le=1.0, description="α of DeepSeek-V3's sequence-wise auxiliary loss (0 = off).")
    switch_aux_alpha: float = Field(0.0, ge=0.0, le=1.0, description="Coefficient of the classic Switch-style load-balancing loss.")
    z_loss_coef: float = Field(0.0, ge=0.0, le=1.0, description="Coefficient of the router z-loss (ST-MoE).")

    @model_validator(mode="after")
    def _check_calibration(self) -> BalanceConfig:
        if self.calibrate_at_end and self.eval_bias != "average":
            raise ValueError("calibrate_at_end writes the eval-time bias, which eval_bias=live never routes with; "
                             "set model.moe.balance.eval_bias=average or calibrate_at_end=false")
        return self


class BungeeConfig(Section):
    """The Kaiju-style recipe's bungee: "a single scalar at the output of the experts' pre-output norm,
    initialised at 2.0". Where that output is, is a reading: the pre-FFN norm's output that feeds
    the experts (`input`; the router reads that output unscaled), or the MoE layer's combined
    expert output (`output`)."""

    enabled: bool = Field(True, description="Use the learnable bungee scalar.")
    init: float = Field(2.0, gt=0.0, le=100.0, description="Initial value of the scalar (the recipe's 2.0).")
    placement: Literal["input", "output"] = Field(
        "input", description="input: scales the normed MoE input the experts see (the router reads it unscaled); "
        "output: scales the combined routed + shared expert output.",
    )


class MoEConfig(Section):
    n_routed_experts: int = Field(8, ge=1, le=1024, description="Number of fine-grained routed experts per MoE layer.")
    n_shared_experts: int = Field(1, ge=0, le=16, description="Always-on shared experts per MoE layer.")
    expert_hidden: int = Field(64, ge=1, description="Hidden width of each SwiGLU expert.")
    top_k: int = Field(2, ge=1, description="Routed experts chosen per token.")
    score_func: Literal["softmax", "sigmoid"] = Field("sigmoid", description="Router score function (DeepSeek-V3 uses sigmoid).")
    norm_topk_prob: bool = Field(True, description="Renormalise the selected experts' weights to sum to 1.")
    route_scale: float = Field(1.0, gt=0.0, le=100.0, description="Multiplier on the combined routing weights.")
    n_groups: int = Field(1, ge=1, description="Expert groups for group-limited routing (1 = off).")
    topk_groups: int = Field(1, ge=1, description="Groups each token may route into when n_groups > 1.")
    capacity_factor: float | None = Field(
        None, gt=0.0, le=64.0, description="Per-expert capacity as a multiple of the even share; None = dropless."
    )
    dispatch_backend: Literal["loop", "grouped_mm", "triton", "fused", "auto"] = Field(
        "auto",
        description="Expert dispatch kernel: loop (reference), grouped_mm (torch._grouped_mm), triton, "
        "fused (whole routed path per expert), auto (grouped_mm on CUDA; on CPU fused for large layers, else loop).",
    )
    bungee: BungeeConfig = Field(
        default_factory=BungeeConfig, description="The learnable bungee scalar (true/false switches it on/off)."
    )
    balance: BalanceConfig = Field(default_factory=BalanceConfig, description="Load-balancing losses and bias update.")
    precision: PrecisionConfig = Field(
        default_factory=PrecisionConfig, description="Number format of expert (and dense) GEMMs: bf16, fp8, nvfp4."
    )

    @field_validator("bungee", mode="before")
    @classmethod
    def _bungee_switch(cls, value):
        """`bungee: false` / `model.moe.bungee=true` switch the scalar with its other knobs at their defaults."""
        return {"enabled": value} if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _check_routing(self) -> MoEConfig:
        if self.top_k > self.n_routed_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= n_routed_experts ({self.n_routed_experts})")
        if self.n_routed_experts % self.n_groups:
            raise ValueError(f"n_groups ({self.n_groups}) must divide n_routed_experts ({self.n_routed_experts})")
        if self.topk_groups > self.n_groups:
            raise ValueError(f"topk_groups ({self.topk_groups}) must be <= n_groups ({self.n_groups})")
        if self.n_groups > 1 and self.top_k > self.topk_groups * (self.n_routed_experts // self.n_groups):
            raise ValueError("top_k exceeds the experts reachable in topk_groups groups")
        return self


# Model fields that set a matrix's fan-in or fan-out (widths): the ones `mup.base_shapes` may give.
WIDTH_FIELDS = (
    "n_heads", "n_kv_heads", "head_dim", "dense_hidden", "moe.expert_hidden",
    "attention.mla.q_lora_rank", "attention.mla.kv_lora_rank", "attention.mla.qk_nope_head_dim",
    "attention.mla.qk_rope_head_dim", "attention.mla.v_head_dim",
    "attention.kda.n_heads", "attention.kda.head_dim", "attention.kda.gate_rank",
)


class MuPConfig(Section):
    enabled: bool = Field(True, description="Use muP: per-matrix init and LR multipliers relative to the base model's shapes.")
    base_width: int = Field(64, ge=8, description="d_model of the base model (the tuned proxy), where multipliers are 1.")
    base_shapes: dict[str, int] = Field(
        default_factory=dict,
        description="Other widths of the base model, as model fields (e.g. {moe.expert_hidden: 64, n_heads: 4}); "
        "a width not listed keeps this model's value, i.e. muP treats it as fixed (finite).",
    )
    embedding_multiplier: float = Field(10.66, gt=0.0, le=1000.0, description="Multiplier on the embedding output.")
    output_multiplier: float = Field(0.125, gt=0.0, le=100.0, description="Multiplier on the output logits.")

    @model_validator(mode="after")
    def _check_base_shapes(self) -> MuPConfig:
        unknown = sorted(set(self.base_shapes) - set(WIDTH_FIELDS))
        if unknown:
            raise ValueError(f"mup.base_shapes: {unknown} are not width fields; allowed: {list(WIDTH_FIELDS)}")
        bad = {k: v for k, v in self.base_shapes.items() if v < 1}
        if bad:
            raise ValueError(f"mup.base_shapes: widths must be >= 1, got {bad}")
        return self


class ModelConfig(Section):
    vocab_size: int = Field(4096, ge=16, le=1_048_576, description="Vocabulary size (must cover the tokenizer's).")
    d_model: int = Field(64, ge=8, le=65536, description="Residual stream width.")
    n_layers: int = Field(4, ge=1, le=512, description="Transformer blocks.")
    n_heads: int = Field(4, ge=1, le=1024, description="Attention query heads.")
    n_kv_heads: int = Field(2, ge=1, le=1024, description="Key/value heads (GQA); must divide n_heads.")
    head_dim: int | None = Field(None, ge=4, le=1024, description="Per-head width; None = d_model // n_heads.")
    max_seq_len: int = Field(256, ge=8, le=1_048_576, description="Longest sequence the model (RoPE cache) supports.")
    rope_theta: float = Field(10000.0, gt=0.0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-6, gt=0.0, le=1e-2, description="RMSNorm epsilon.")
    tie_embeddings: bool = Field(False, description="Share the input embedding and output head weights.")
    ffn: Literal["moe", "dense"] = Field("moe", description="moe, or a dense SwiGLU FFN matching the MoE's active parameters.")
    first_k_dense: int = Field(1, ge=0, description="Leading layers with a dense FFN instead of MoE.")
    dense_hidden: int | None = Field(
        None, ge=1, description="Hidden width of dense FFNs; None = the MoE's active expert width (shared + top_k)."
    )
    init_std: float = Field(0.02, gt=0.0, le=1.0, description="Std of the normal init at base width (scaled by muP).")
    moe: MoEConfig = Field(default_factory=MoEConfig, description="Mixture-of-Experts layer.")
    attention: AttentionConfig = Field(default_factory=AttentionConfig, description="Attention kinds per layer.")
    mup: MuPConfig = Field(default_factory=MuPConfig, description="muP parameterisation.")

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}) when head_dim is unset")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if self.first_k_dense > self.n_layers:
            raise ValueError(f"first_k_dense ({self.first_k_dense}) must be <= n_layers ({self.n_layers})")
        if self.mup.enabled:
            try:
                self.mup_base()
            except ValidationError as exc:
                problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
                raise ValueError(
                    f"the muP base model (d_model = mup.base_width = {self.mup.base_width}, with mup.base_shapes "
                    f"{self.mup.base_shapes or '{}'}) is not a valid model: {problems}. Give the base's widths in "
                    "model.mup.base_shapes (e.g. {n_heads: 4, n_kv_heads: 2}) or change mup.base_width"
                ) from None
        return self

    def mup_base(self) -> ModelConfig:
        """The muP base model's config: this one with base_width as d_model and `mup.base_shapes` applied.

        Validated with the model (a base that cannot be built fails at config check, not when the
        model is built mid-run)."""
        data = self.model_dump(mode="json")
        data["d_model"] = self.mup.base_width
        data["mup"]["enabled"] = False
        data["mup"]["base_shapes"] = {}
        for key, value in self.mup.base_shapes.items():
            *path, leaf = key.split(".")
            node = data
            for part in path:
                node = node[part]
            node[leaf] = value
        return type(self).model_validate(data)

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def resolved_dense_hidden(self) -> int:
        """Dense FFN width whose parameters match the MoE's active experts (shared + top_k)."""
        if self.dense_hidden is not None:
            return self.dense_hidden
        return self.moe.expert_hidden * (self.moe.n_shared_experts + self.moe.top_k)

    def attention_kind(self, layer: int) -> str:
        pattern = self.attention.pattern
        return pattern[layer % len(pattern)]
