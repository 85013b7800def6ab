"""A tiny MoE and a small byte-level tokenizer, shared by the evaluation tests (random weights:
the tests check arithmetic and plumbing, not quality)."""

from __future__ import annotations

from pydoc_data.topics import topics

import pytest
import torch

from shared.config.model import ModelConfig
from shared.data.tokenizer import train_tokenizer
from shared.model import MoETransformer

VOCAB = 384


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    texts = [t for _, t in sorted(topics.items())][:60]
    return train_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=VOCAB)


@pytest.fixture(scope="session")
def model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, max_seq_len=64,
                      first_k_dense=1, moe={"n_routed_experts": 4, "n_shared_experts": 1, "expert_hidden": 32,
                                            "top_k": 2})
    return MoETransformer(cfg).eval()
