"""Fixtures for the scorer tests: the shipped MiniLM backbone (loaded once) and a tiny random gpt-oss."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def minilm():
    from services.scorer.backbone import LayerwiseBackbone

    return LayerwiseBackbone.load("minilm")


def tiny_gpt_oss():
    """A randomly initialised gpt-oss with sliding and full attention layers, built offline."""
    from transformers import GptOssConfig, GptOssModel

    cfg = GptOssConfig(
        vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        max_position_embeddings=128, layer_types=["sliding_attention", "full_attention"] * 2,
    )
    torch.manual_seed(0)
    return GptOssModel(cfg).eval()
