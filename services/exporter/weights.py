"""moelab tensors ↔ Hugging Face tensors, with every difference folded in and an exact way back.

To HF (`to_hf`), the function stays the same:
- the muP embedding multiplier is multiplied into the embedding table (moelab multiplies each
  looked-up row by the same number, so the rows are bitwise what moelab computes);
- the muP output multiplier into the final norm's gain (moelab folds it there too); with tied
  embeddings the head is the scaled table, so the gain also takes 1/embedding multiplier;
- the bungee scalar into the experts' first matrices (`input` placement: w1 and w3 of every routed
  and shared expert see b·x, and SwiGLU's two input projections are linear in x) or into their
  output matrices (`output` placement: w2);
- the router bias chosen for eval routing (`average` or `live`) becomes `e_score_correction_bias`,
  kept fp32 (HF keeps that buffer and the gate in fp32 by design);
- MLA's RoPE channels are reordered from moelab's rotate-half layout to DeepSeek's interleaved
  pairs (channel i and i + d/2 become 2i and 2i + 1): a permutation, the same rotation;
- w1/w3 of the routed experts are stacked as HF's `gate_up_proj`; no shared expert becomes an
  all-zero one (HF's MoE always has one; zero weights add exactly zero).

Back to moelab (`from_hf`), bitwise: products by a multiplier are divided back, and the few values
where that division does not undo the rounding are restored from the export's `restore` tensors
(indices and original values), next to the bungee scalars and both router biases, which HF has no
place for. So `import(export(ckpt)) == ckpt` bit for bit, while the HF files stay the plain function.
"""

from __future__ import annotations

import torch
from torch import Tensor

from services.exporter.mapping import DEEPSEEK_V3, Architecture
from shared.config.model import ModelConfig
from shared.model.mup import embedding_multiplier, logit_multiplier

Restore = dict[str, Tensor]


def _fold(name: str, w: Tensor, scale: float | Tensor, restore: Restore) -> Tensor:
    """w·scale, recording where (w·scale)/scale is not bitwise w so the import can put w back."""
    out = w * scale
    back = out / scale
    bad = (back.view(torch.int32) != w.view(torch.int32)).reshape(-1).nonzero().squeeze(1)
    if bad.numel():
        restore[f"fix.{name}.idx"] = bad.to(torch.int32) if w.numel() < 2**31 else bad
        restore[f"fix.{name}.val"] = w.reshape(-1)[bad].clone()
    return out


def _unfold(name: str, w: Tensor, scale: float | Tensor, restore: Restore) -> Tensor:
    back = (w / scale).contiguous()
    idx = restore.get(f"fix.{name}.idx")
    if idx is not None:
        back.view(-1)[idx.long()] = restore[f"fix.{name}.val"]
    return back


def rope_interleave_perm(dim: int) -> Tensor:
    """Channel order taking rotate-half layout (i pairs with i + dim/2) to interleaved (2i with 2i + 1)."""
    h = dim // 2
    return torch.stack([torch.arange(h), torch.arange(h) + h], dim=-1).reshape(-1)


def _permute_rope_rows(w: Tensor, group: int, offset: int, rope: int, inverse: bool) -> Tensor:
    """Reorder the `rope` rows starting at `offset` within every block of `group` rows."""
    perm = rope_interleave_perm(rope)
    if inverse:
        perm = torch.argsort(perm)
    blocks = w.reshape(-1, group, w.shape[-1]).clone()
    blocks[:, offset:offset + rope] = blocks[:, offset:offset + rope][:, perm]
    return blocks.reshape(w.shape)


def _attention_names(cfg: ModelConfig, arch: Architecture) -> dict[str, str]:
    """moelab attention parameter name → HF name (per layer, without prefixes)."""
    if arch is not DEEPSEEK_V3:
        return {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj"}
    names = {"wkv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "wkv_b": "kv_b_proj", "wo": "o_proj"}
    if cfg.attention.mla.q_lora_rank > 0:
        names.update({"wq_a": "q_a_proj", "q_norm": "q_a_layernorm", "wq_b": "q_b_proj"})
    else:
        names["wq"] = "q_proj"
    return names


def _mla_rope_rows(cfg: ModelConfig, moelab_name: str) -> tuple[int, int, int] | None:
    """(group, offset, rope) of the RoPE rows in an MLA projection, or None when it has none."""
    m = cfg.attention.mla
    if moelab_name in ("wq", "wq_b"):
        return m.qk_nope_head_dim + m.qk_rope_head_dim, m.qk_nope_head_dim, m.qk_rope_head_dim
    if moelab_name == "wkv_a":
        return m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank, m.qk_rope_head_dim
    return None


def _is_moe_layer(cfg: ModelConfig, i: int) -> bool:
    return cfg.ffn == "moe" and i >= cfg.first_k_dense


def to_hf(state: dict[str, Tensor], cfg: ModelConfig, arch: Architecture, bias: str) -> tuple[dict[str, Tensor], Restore]:
    """HF state dict (in-memory names of `arch`'s model) and the restore tensors for `from_hf`."""
    restore: Restore = {}
    emb_m, logit_m = embedding_multiplier(cfg), logit_multiplier(cfg)
    hf: dict[str, Tensor] = {"model.embed_tokens.weight": _fold("embed", state["tok_embeddings.weight"], emb_m, restore)}
    final_scale = logit_m / emb_m if cfg.tie_embeddings else logit_m
    hf["model.norm.weight"] = _fold("norm", state["norm.weight"], final_scale, restore)
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = state["lm_head.weight"]
    attn_names = _attention_names(cfg, arch)
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        hf[dst + "input_layernorm.weight"] = state[src + "attn_norm.weight"]
        hf[dst + "post_attention_layernorm.weight"] = state[src + "ffn_norm.weight"]
        for ours, theirs in attn_names.items():
            w = state[f"{src}attn.{ours}.weight"]
            rows = _mla_rope_rows(cfg, ours) if arch is DEEPSEEK_V3 else None
            hf[f"{dst}self_attn.{theirs}.weight"] = _permute_rope_rows(w, *rows, inverse=False) if rows else w
        if not _is_moe_layer(cfg, i):
            for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                hf[f"{dst}mlp.{theirs}.weight"] = state[f"{src}ffn.{ours}.weight"]
            continue
        hf.update(_moe_to_hf(state, cfg, i, bias, restore))
    return hf, restore


def _moe_to_hf(state: dict[str, Tensor], cfg: ModelConfig, i: int, bias: str, restore: Restore) -> dict[str, Tensor]:
    src, dst = f"layers.{i}.ffn.", f"model.layers.{i}.mlp."
    moe = cfg.moe
    b = state.get(src + "bungee")
    on_input = b is not None and moe.bungee.placement == "input"
    on_output = b is not None and not on_input
    if b is not None:
        restore[f"bungee.{i}"] = b.clone()
    live, avg = state[src + "router.expert_bias_E"], state[src + "router.expert_bias_avg_E"]
    restore[f"bias_live.{i}"], restore[f"bias_avg.{i}"] = live.clone(), avg.clone()

    def scaled(name: str, w: Tensor, first: bool) -> Tensor:
        return _fold(f"{i}.{name}", w, b, restore) if (on_input and first) or (on_output and not first) else w

    out = {
        dst + "gate.weight": state[src + "router.weight_ED"].float(),
        dst + "gate.e_score_correction_bias": (avg if bias == "average" else live).float().clone(),
        dst + "experts.gate_up_proj": torch.cat([scaled("w1", state[src + "experts.w1_EFD"], True),
                                                 scaled("w3", state[src + "experts.w3_EFD"], True)], dim=1),
        dst + "experts.down_proj": scaled("w2", state[src + "experts.w2_EDF"], False),
    }
    if moe.n_shared_experts:
        for ours, theirs, first in (("w1", "gate_proj", True), ("w3", "up_proj", True), ("w2", "down_proj", False)):
            out[f"{dst}shared_experts.{theirs}.weight"] = scaled(f"shared_{ours}", state[f"{src}shared.{ours}.weight"], first)
    else:
        F, D = moe.expert_hidden, cfg.d_model
        like = state[src + "experts.w1_EFD"]
        out[dst + "shared_experts.gate_proj.weight"] = like.new_zeros(F, D)
        out[dst + "shared_experts.up_proj.weight"] = like.new_zeros(F, D)
        out[dst + "shared_experts.down_proj.weight"] = like.new_zeros(D, F)
    return out


def from_hf(hf: dict[str, Tensor], cfg: ModelConfig, arch: Architecture, restore: Restore,
            rope_interleave: bool = True) -> dict[str, Tensor]:
    """The moelab state dict `to_hf` started from (bitwise, given its restore tensors). A third-party
    DeepSeek-V3 folder with `rope_interleave: false` already has moelab's rotate-half layout: no permutation."""
    emb_m, logit_m = embedding_multiplier(cfg), logit_multiplier(cfg)
    state = {"tok_embeddings.weight": _unfold("embed", hf["model.embed_tokens.weight"], emb_m, restore)}
    final_scale = logit_m / emb_m if cfg.tie_embeddings else logit_m
    state["norm.weight"] = _unfold("norm", hf["model.norm.weight"], final_scale, restore)
    if not cfg.tie_embeddings:
        state["lm_head.weight"] = hf["lm_head.weight"]
    attn_names = _attention_names(cfg, arch)
    for i in range(cfg.n_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        state[dst + "attn_norm.weight"] = hf[src + "input_layernorm.weight"]
        state[dst + "ffn_norm.weight"] = hf[src + "post_attention_layernorm.weight"]
        for ours, theirs in attn_names.items():
            w = hf[f"{src}self_attn.{theirs}.weight"]
            rows = _mla_rope_rows(cfg, ours) if arch is DEEPSEEK_V3 and rope_interleave else None
            state[f"{dst}attn.{ours}.weight"] = _permute_rope_rows(w, *rows, inverse=True) if rows else w
        if not _is_moe_layer(cfg, i):
            for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                state[f"{dst}ffn.{ours}.weight"] = hf[f"{src}mlp.{theirs}.weight"]
            continue
        state.update(_moe_from_hf(hf, cfg, i, restore))
    return {k: v.contiguous() for k, v in state.items()}


def _moe_from_hf(hf: dict[str, Tensor], cfg: ModelConfig, i: int, restore: Restore) -> dict[str, Tensor]:
    src, dst = f"model.layers.{i}.mlp.", f"layers.{i}.ffn."
    moe = cfg.moe
    b = restore.get(f"bungee.{i}")
    on_input = b is not None and moe.bungee.placement == "input"
    on_output = b is not None and not on_input

    def unscaled(name: str, w: Tensor, first: bool) -> Tensor:
        return _unfold(f"{i}.{name}", w, b, restore) if (on_input and first) or (on_output and not first) else w

    w1, w3 = hf[src + "experts.gate_up_proj"].split(moe.expert_hidden, dim=1)
    out = {
        dst + "router.weight_ED": hf[src + "gate.weight"],
        dst + "router.expert_bias_E": restore.get(f"bias_live.{i}", hf[src + "gate.e_score_correction_bias"]),
        dst + "router.expert_bias_avg_E": restore.get(f"bias_avg.{i}", hf[src + "gate.e_score_correction_bias"]),
        dst + "experts.w1_EFD": unscaled("w1", w1, True),
        dst + "experts.w3_EFD": unscaled("w3", w3, True),
        dst + "experts.w2_EDF": unscaled("w2", hf[src + "experts.down_proj"], False),
    }
    if b is not None:
        out[dst + "bungee"] = b
    if moe.n_shared_experts:
        for ours, theirs, first in (("w1", "gate_proj", True), ("w3", "up_proj", True), ("w2", "down_proj", False)):
            out[f"{dst}shared.{ours}.weight"] = unscaled(f"shared_{ours}", hf[f"{src}shared_experts.{theirs}.weight"], first)
    return out


