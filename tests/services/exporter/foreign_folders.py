"""Tiny third-party Hugging Face folders, as `transformers` itself writes them: a randomly initialised
`Glm4MoeForCausalLM`, `DeepseekV3ForCausalLM` or `LlamaForCausalLM` from a config (`save_pretrained`),
with a fast tokenizer. Router correction biases are set apart from zero so an import that dropped
them would route differently; the init is wide enough that greedy choices are not near-ties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

from tests.shared.checkpoint.fake_run import VOCAB, shared_tokenizer

COMMON: dict[str, Any] = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "max_position_embeddings": 64, "initializer_range": 0.1, "eos_token_id": None,
                          "bos_token_id": None, "pad_token_id": None}
MOE: dict[str, Any] = {"intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 8,
                       "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 2,
                       "topk_group": 1, "routed_scaling_factor": 1.5, "num_nextn_predict_layers": 0}
CONFIGS: dict[str, dict[str, Any]] = {
    "Glm4MoeForCausalLM": {**COMMON, **MOE, "model_type": "glm4_moe", "num_key_value_heads": 2, "head_dim": 16,
                           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}},
    "DeepseekV3ForCausalLM": {**COMMON, **MOE, "model_type": "deepseek_v3", "num_key_value_heads": 4, "q_lora_rank": 32,
                              "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
                              "head_dim": 8, "rms_norm_eps": 1e-6},
    "LlamaForCausalLM": {**COMMON, "model_type": "llama", "num_key_value_heads": 2, "intermediate_size": 128,
                         "tie_word_embeddings": True},
}


def hf_config(arch: str, **overrides: Any) -> transformers.PretrainedConfig:
    fields = {**CONFIGS[arch], **overrides}
    return transformers.AutoConfig.for_model(fields.pop("model_type"), **fields, architectures=[arch])


def write_tokenizer(folder: Path, tok_dir: Path) -> None:
    tok = shared_tokenizer(tok_dir)
    transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok / "tokenizer.json"),
                                         eos_token="<|endoftext|>").save_pretrained(folder)


def foreign_folder(tmp: Path, arch: str, name: str | None = None, *, weights: bool = True, tokenizer: bool = True,
                   **overrides: Any) -> Path:
    """`tmp/<name>`: config.json (+ model.safetensors when `weights`, + tokenizer files when `tokenizer`)."""
    folder = tmp / (name or arch)
    config = hf_config(arch, **overrides)
    if weights:
        torch.manual_seed(0)
        model = getattr(transformers, arch)(config)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for module in model.modules():
                bias = getattr(module, "e_score_correction_bias", None)
                if bias is not None:
                    bias.copy_(torch.randn(bias.shape, generator=gen) * 0.5)
        model.save_pretrained(folder)
    else:
        config.save_pretrained(folder)
    if tokenizer:
        write_tokenizer(folder, tmp / "tok")
    return folder
