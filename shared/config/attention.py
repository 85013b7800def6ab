"""Attention section: which attention each layer uses, and each variant's knobs.

`pattern` is repeated over depth, so `[kda, kda, kda, mla]` gives the Kimi-Linear 3:1 hybrid and
`[swa, swa, swa, gqa]` a sliding-window model with a global (full) layer every 4th. Defaults are
sized for the `tiny` CPU model; the papers' values are quoted in each description.
Config must not import model code: a test keeps `ATTENTION_KINDS` equal to the registry in
`shared/model/attention/`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from shared.config.base import Section

# Attention kinds a layer can use; shared/model/attention registers an implementation for each.
ATTENTION_KINDS = ("gqa", "mla", "swa", "nsa", "kda")


class MLAConfig(Section):
    """DeepSeek-V2 multi-head latent attention (arXiv:2405.04434); V3 uses 1536/512/64/128/128."""

    q_lora_rank: int = Field(32, ge=0, le=65536, description="Rank of the query compression (0 = full-rank queries).")
    kv_lora_rank: int = Field(16, ge=1, le=65536, description="Rank of the joint KV latent (what the KV cache stores).")
    qk_nope_head_dim: int = Field(16, ge=1, le=1024, description="Per-head query/key channels without RoPE.")
    qk_rope_head_dim: int = Field(8, ge=2, le=1024, description="Decoupled RoPE channels; the RoPE key is shared by heads.")
    v_head_dim: int = Field(16, ge=1, le=1024, description="Per-head value channels.")

    @model_validator(mode="after")
    def _check_rope_dim(self) -> MLAConfig:
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"mla.qk_rope_head_dim ({self.qk_rope_head_dim}) must be even (RoPE rotates pairs)")
        return self


class SWAConfig(Section):
    """Sliding-window attention (Mistral 7B, arXiv:2310.06825) with optional sinks."""

    window: int = Field(64, ge=1, le=1_048_576, description="Keys each query sees: itself and the window-1 before it.")
    sink_tokens: int = Field(0, ge=0, le=1024, description="Leading tokens every query also sees (StreamingLLM sinks).")
    learned_sinks: bool = Field(False, description="A learned per-head sink logit in the softmax (gpt-oss style).")


class NSAConfig(Section):
    """Native Sparse Attention (arXiv:2502.11089); the paper uses block 64, 16 selected blocks, window 512."""

    block_size: int = Field(16, ge=2, le=4096, description="Tokens per compressed block and per selected block.")
    n_selected: int = Field(4, ge=1, le=4096, description="Blocks each query attends in the selection branch (top-n).")
    window: int = Field(32, ge=1, le=1_048_576, description="Sliding-window branch: keys each query sees.")


class KDAConfig(Section):
    """Kimi Delta Attention (Kimi Linear, arXiv:2510.26692): gated delta rule with channel-wise decay."""

    n_heads: int | None = Field(None, ge=1, le=1024, description="KDA heads; None = model.n_heads.")
    head_dim: int | None = Field(None, ge=4, le=1024, description="Per-head key/value width; None = model head_dim.")
    chunk_size: int = Field(
        16, ge=1, le=1024, description="Chunk length of our chunked form (16 is ~4x faster than 64 on CPU; fla uses 64)."
    )
    conv_size: int = Field(4, ge=1, le=16, description="Kernel of the causal depthwise short convolution on q, k, v.")
    gate_rank: int = Field(16, ge=1, le=4096, description="Low-rank width of the decay and output-gate projections.")
    use_fla: bool = Field(True, description="Use flash-linear-attention kernels on CUDA when installed.")


class AttentionConfig(Section):
    pattern: list[str] = Field(
        default_factory=lambda: ["gqa"], min_length=1, description="Attention kind per layer, repeated over depth."
    )
    mla: MLAConfig = Field(default_factory=MLAConfig, description="Multi-head latent attention knobs.")
    swa: SWAConfig = Field(default_factory=SWAConfig, description="Sliding-window attention knobs.")
    nsa: NSAConfig = Field(default_factory=NSAConfig, description="Native sparse attention knobs.")
    kda: KDAConfig = Field(default_factory=KDAConfig, description="Kimi delta attention knobs.")

    @model_validator(mode="after")
    def _check_kinds(self) -> AttentionConfig:
        unknown = [k for k in self.pattern if k not in ATTENTION_KINDS]
        if unknown:
            raise ValueError(f"unknown attention kind(s) {unknown}; allowed: {list(ATTENTION_KINDS)}")
        return self
