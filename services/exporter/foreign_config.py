"""A Hugging Face `config.json` that moelab did not write → the moelab model config that computes the same
function, or a refusal naming the field moelab cannot represent exactly.

Read for `moelab import` of a third-party folder (e.g. a `Glm4MoeForCausalLM`, `DeepseekV3ForCausalLM`
or `LlamaForCausalLM` saved by `transformers`). The config is read through `transformers.AutoConfig`,
so a field the file leaves out takes the value transformers computes with. The mapping is the
export's (`mapping.hf_config`) read backwards, with what a moelab export never writes turned into
settings that leave the function unchanged: muP off (every multiplier 1: the HF weights already are
the function), no bungee scalar, both router biases set to `e_score_correction_bias`.

Refused, each naming its field: any activation but SiLU, attention or MLP biases, attention dropout
(moelab has none, so continued training would differ), a RoPE type other than `default` or a partial
rotary factor other than 1 (moelab rotates the whole head), GLM's q/k norms, a router that is not
sigmoid with a selection bias (`scoring_func`, `topk_method`), renormalising a single chosen expert
(moelab keeps its score), groups of one expert, DeepSeek-V3 latent norms at an ε other than its fixed
1e-6, and widths outside moelab's config bounds. What this reader does not know about is caught by the
import's round-trip check (logits within 1e-4 and greedy continuations equal), not passed over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers
from pydantic import ValidationError

from services.exporter.mapping import ARCHITECTURES, DEEPSEEK_V3, GLM4_MOE, Architecture
from shared.config.model import ModelConfig


class ImportRefused(ValueError):
    """The folder cannot be imported; the message names the file or field."""


@dataclass(frozen=True)
class ForeignModel:
    architecture: Architecture
    model: ModelConfig
    rope_interleave: bool  # DeepSeek-V3's interleaved RoPE pairs (weights are permuted back on import)


def _refuse(config_file: Path, field: str, value: Any, reason: str) -> ImportRefused:
    return ImportRefused(f"{config_file}: {field} = {value!r}: {reason}; moelab cannot represent it exactly, so the "
                         "folder is not imported (an approximation would pass for the model and not be it)")


def _architecture(config: transformers.PretrainedConfig, config_file: Path) -> Architecture:
    by_type = {a.model_type: a for a in ARCHITECTURES}
    arch = by_type.get(config.model_type)
    if arch is None:
        raise _refuse(config_file, "model_type", config.model_type,
                      f"only {sorted(by_type)} ({', '.join(a.name for a in ARCHITECTURES)}) are read")
    named = list(getattr(config, "architectures", None) or [arch.name])
    if named != [arch.name]:
        raise _refuse(config_file, "architectures", named, f"a {config.model_type} folder is read as {arch.name} only")
    return arch


def _rope(config: transformers.PretrainedConfig, config_file: Path) -> float:
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise _refuse(config_file, "rope_parameters.rope_type", rope.get("rope_type"),
                      "moelab's RoPE has no frequency scaling (only rope_type 'default')")
    if float(rope.get("partial_rotary_factor", 1.0)) != 1.0:
        raise _refuse(config_file, "rope_parameters.partial_rotary_factor", rope["partial_rotary_factor"],
                      "moelab rotates every channel of a head (factor 1.0)")
    return float(rope.get("rope_theta", 10000.0))


def _check(config: transformers.PretrainedConfig, config_file: Path, field: str, allowed: Any, reason: str) -> None:
    value = getattr(config, field, allowed)
    if value != allowed:
        raise _refuse(config_file, field, value, reason)


def _routing(config: transformers.PretrainedConfig, config_file: Path) -> dict[str, Any]:
    scoring = getattr(config, "scoring_func", "sigmoid")
    if scoring != "sigmoid":  # transformers' class scores with sigmoid regardless; engines that read the field do not
        raise _refuse(config_file, "scoring_func", scoring, "moelab imports sigmoid routers with a selection bias only")
    method = getattr(config, "topk_method", "noaux_tc")
    if method != "noaux_tc":
        raise _refuse(config_file, "topk_method", method, "the routers read here select with e_score_correction_bias "
                      "(noaux_tc); the field says otherwise, so the folder means another function to engines that read it")
    experts, groups, top_k = config.n_routed_experts, config.n_group or 1, config.num_experts_per_tok
    if groups > 1 and experts // groups < 2:
        raise _refuse(config_file, "n_group", groups, f"groups of one expert ({experts} experts): a group is scored by "
                      "its two best experts")
    if config.norm_topk_prob and top_k == 1:
        raise _refuse(config_file, "norm_topk_prob", True, "with num_experts_per_tok 1 this makes the routed weight 1; "
                      "moelab renormalises only when more than one expert is chosen")
    if config.n_shared_experts < 1:
        raise _refuse(config_file, "n_shared_experts", config.n_shared_experts, "the HF MoE layer always has a shared MLP")
    return {
        "n_routed_experts": experts, "n_shared_experts": config.n_shared_experts,
        "expert_hidden": config.moe_intermediate_size, "top_k": top_k, "score_func": "sigmoid",
        "norm_topk_prob": bool(config.norm_topk_prob), "route_scale": float(config.routed_scaling_factor),
        "n_groups": groups, "topk_groups": config.topk_group or 1, "capacity_factor": None, "bungee": {"enabled": False},
    }


def read_foreign_config(folder: Path) -> ForeignModel:
    """The moelab model of the HF folder at `folder` (its `config.json`), or `ImportRefused` naming the field."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ImportRefused(f"{config_file}: missing; {folder} is not a Hugging Face model folder")
    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, OSError) as exc:
        raise ImportRefused(f"{config_file}: transformers cannot read it: {exc}") from None
    arch = _architecture(config, config_file)
    rope_theta = _rope(config, config_file)
    _check(config, config_file, "hidden_act", "silu", "moelab's FFNs are SwiGLU (SiLU gate)")
    _check(config, config_file, "attention_bias", False, "moelab's attention projections have no bias")
    _check(config, config_file, "mlp_bias", False, "moelab's FFN projections have no bias")
    _check(config, config_file, "attention_dropout", 0.0, "moelab has no attention dropout (continued training "
           "would compute another function)")
    fields: dict[str, Any] = {
        "vocab_size": config.vocab_size, "d_model": config.hidden_size, "n_layers": config.num_hidden_layers,
        "n_heads": config.num_attention_heads, "max_seq_len": config.max_position_embeddings,
        "rope_theta": rope_theta, "norm_eps": config.rms_norm_eps, "tie_embeddings": bool(config.tie_word_embeddings),
        "init_std": config.initializer_range, "dense_hidden": config.intermediate_size, "mup": {"enabled": False},
    }
    rope_interleave = False
    if arch is DEEPSEEK_V3:
        if config.rms_norm_eps != 1e-6:
            raise _refuse(config_file, "rms_norm_eps", config.rms_norm_eps, "DeepSeek-V3's latent norms use a fixed "
                          "1e-6 while the other norms use this value; moelab has one ε for every norm")
        if config.num_key_value_heads != config.num_attention_heads:
            raise _refuse(config_file, "num_key_value_heads", config.num_key_value_heads,
                          f"MLA gives every one of the {config.num_attention_heads} heads its own key and value")
        if getattr(config, "head_dim", config.qk_rope_head_dim) != config.qk_rope_head_dim:
            raise _refuse(config_file, "head_dim", config.head_dim, f"transformers rotates head_dim channels; "
                          f"moelab rotates qk_rope_head_dim ({config.qk_rope_head_dim})")
        rope_interleave = bool(getattr(config, "rope_interleave", True))
        fields.update(n_kv_heads=config.num_attention_heads, first_k_dense=config.first_k_dense_replace,
                      moe=_routing(config, config_file), attention={"pattern": ["mla"], "mla": {
                          "q_lora_rank": config.q_lora_rank or 0, "kv_lora_rank": config.kv_lora_rank,
                          "qk_nope_head_dim": config.qk_nope_head_dim, "qk_rope_head_dim": config.qk_rope_head_dim,
                          "v_head_dim": config.v_head_dim}})
    else:
        fields.update(n_kv_heads=config.num_key_value_heads, attention={"pattern": ["gqa"]},
                      head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        if arch is GLM4_MOE:
            _check(config, config_file, "use_qk_norm", False, "moelab's GQA has no per-head q/k norms")
            fields.update(first_k_dense=config.first_k_dense_replace, moe=_routing(config, config_file))
        else:  # LLAMA: every FFN dense
            fields.update(ffn="dense", first_k_dense=0)
    try:
        model = ModelConfig.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ImportRefused(f"{config_file}: outside what a moelab model config allows ({problems})") from None
    return ForeignModel(arch, model, rope_interleave)
