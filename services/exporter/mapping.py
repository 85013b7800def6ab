"""Which Hugging Face architecture computes exactly what a moelab model computes, and its config.json.

Chosen by exact equivalence, not by name (docs/export.md has the table):
- every layer GQA, MoE FFNs (sigmoid router, correction bias, shared experts) → `Glm4MoeForCausalLM`
  (GLM-4-MoE: Llama-style GQA with rotate-half RoPE over the whole head, DeepSeek-V3's router);
- every layer MLA, MoE FFNs → `DeepseekV3ForCausalLM` (MLA with the decoupled RoPE key, same router);
- the dense twin (`ffn: dense`, GQA) → `LlamaForCausalLM` (pre-norm RMSNorm, GQA, SwiGLU).
Whatever has no exact counterpart is refused with the layer, its kind and the reason
(`ExportRefused`): SWA, NSA and KDA layers, mixed attention patterns, a softmax router (its
correction bias has no place in an HF softmax router), capacity-limited (token-dropping) experts,
fp8/nvfp4 expert or dense GEMMs (the exported fp32 weights would compute another function).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config.model import ModelConfig
from shared.precision.recipe import gemm_recipe


class ExportRefused(ValueError):
    """The model has a part no Hugging Face architecture computes exactly; the message names it."""


@dataclass(frozen=True)
class Architecture:
    name: str  # the HF class, e.g. Glm4MoeForCausalLM
    model_type: str
    attention: str  # moelab attention kind of every layer
    moe: bool


GLM4_MOE = Architecture("Glm4MoeForCausalLM", "glm4_moe", "gqa", True)
DEEPSEEK_V3 = Architecture("DeepseekV3ForCausalLM", "deepseek_v3", "mla", True)
LLAMA = Architecture("LlamaForCausalLM", "llama", "gqa", False)
ARCHITECTURES = (GLM4_MOE, DEEPSEEK_V3, LLAMA)


def _refuse(layer: int | str, kind: str, reason: str) -> ExportRefused:
    where = f"layer {layer}" if isinstance(layer, int) else layer
    return ExportRefused(f"{where} ({kind}): {reason}. No Hugging Face architecture computes it exactly, so it is "
                         "not exported (an approximation would pass for the model and not be it)")


def choose_architecture(cfg: ModelConfig) -> Architecture:
    """The architecture for `cfg`, or `ExportRefused` naming the first part without an exact equivalent."""
    kinds = [cfg.attention_kind(i) for i in range(cfg.n_layers)]
    for i, kind in enumerate(kinds):
        if kind not in ("gqa", "mla"):
            raise _refuse(i, kind, {"swa": "sliding-window attention with moelab's sinks and window rule",
                                    "nsa": "native sparse attention (compressed, selected and window branches)",
                                    "kda": "Kimi delta attention (a gated delta-rule recurrence)"}.get(kind, "unknown"))
    if len(set(kinds)) > 1:
        other = next(i for i, k in enumerate(kinds) if k != kinds[0])
        raise _refuse(other, kinds[other], f"mixes attention kinds ({kinds[0]} before it); the HF architectures use "
                      "one kind in every layer")
    precision = cfg.moe.precision
    for mode_name in ("expert", "dense"):
        mode = getattr(precision, mode_name)
        if gemm_recipe(precision, mode).active:
            raise _refuse("model.moe.precision", f"{mode_name} GEMMs in {mode}", "the model computes with quantised "
                          "GEMMs; fp32 weights in an HF model would compute a different function")
    if cfg.ffn == "dense":
        if kinds[0] != "gqa":
            raise _refuse(0, kinds[0], "a dense twin with MLA has no plain dense HF architecture")
        return LLAMA
    moe = cfg.moe
    first_moe = cfg.first_k_dense
    if moe.score_func != "sigmoid":
        raise _refuse(first_moe, "moe router", "softmax scores with a selection bias; HF's biased routers are sigmoid")
    if moe.capacity_factor is not None:
        raise _refuse(first_moe, "moe experts", f"capacity_factor {moe.capacity_factor} drops tokens over capacity; "
                      "HF MoE layers are dropless")
    if moe.n_groups > 1 and moe.n_routed_experts // moe.n_groups < 2:
        raise _refuse(first_moe, "moe router", "groups of one expert (HF scores a group by its two best experts)")
    if kinds[0] == "mla":
        if cfg.norm_eps != 1e-6:
            raise _refuse(0, "mla", f"norm_eps {cfg.norm_eps}: DeepSeek-V3's latent norms use a fixed 1e-6")
        if cfg.attention.mla.qk_rope_head_dim % 2:
            raise _refuse(0, "mla", "an odd RoPE width")
        return DEEPSEEK_V3
    return GLM4_MOE


def hf_config(cfg: ModelConfig, arch: Architecture) -> dict[str, Any]:
    """The HF config fields for `cfg` (what config.json holds besides the library's own keys)."""
    common = {
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads, "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu", "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False, "initializer_range": cfg.init_std,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
    }
    if arch is LLAMA:
        return {**common, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.resolved_head_dim,
                "intermediate_size": cfg.resolved_dense_hidden, "mlp_bias": False}
    moe = cfg.moe
    routing = {
        "moe_intermediate_size": moe.expert_hidden, "n_routed_experts": moe.n_routed_experts,
        # no shared expert in moelab: one all-zero shared expert in HF (which always has one), exactly zero output
        "n_shared_experts": max(1, moe.n_shared_experts), "num_experts_per_tok": moe.top_k,
        # moelab renormalises only when more than one expert is chosen
        "norm_topk_prob": moe.norm_topk_prob and moe.top_k > 1, "routed_scaling_factor": moe.route_scale,
        "n_group": moe.n_groups, "topk_group": moe.topk_groups,
        "first_k_dense_replace": cfg.first_k_dense, "intermediate_size": cfg.resolved_dense_hidden,
    }
    if arch is GLM4_MOE:
        common["rope_parameters"]["partial_rotary_factor"] = 1.0  # GLM's default rotates half of each head
        return {**common, **routing, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.resolved_head_dim,
                "use_qk_norm": False, "num_nextn_predict_layers": 0}
    m = cfg.attention.mla
    return {**common, **routing, "num_key_value_heads": cfg.n_heads,  # MLA: one latent, every head its own K/V
            "q_lora_rank": m.q_lora_rank or None, "kv_lora_rank": m.kv_lora_rank,
            "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
            "v_head_dim": m.v_head_dim, "head_dim": m.qk_rope_head_dim,
            # DeepSeek's interleaved RoPE pairs; the RoPE channels are permuted on export to match (weights.py)
            "rope_interleave": True, "num_nextn_predict_layers": 0,
            # what DeepSeek-V3's own config.json says and vLLM reads: without them vLLM's DeepSeek layer
            # scores with softmax and has no correction bias (transformers' class is sigmoid + bias always)
            "topk_method": "noaux_tc", "scoring_func": "sigmoid"}
