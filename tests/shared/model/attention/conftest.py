"""Tiny configs for attention tests: small enough that every variant runs in milliseconds on CPU."""

from __future__ import annotations

import pytest

from shared.config.model import ModelConfig


def tiny_cfg(kind: str, **overrides) -> ModelConfig:
    """A 32-wide, 4-head model config whose every layer uses `kind`."""
    base = dict(d_model=32, n_heads=4, n_kv_heads=2, max_seq_len=128, vocab_size=64, n_layers=2)
    base.update(overrides)
    cfg = ModelConfig(**base)
    cfg.attention.pattern = [kind]
    return cfg


@pytest.fixture
def make_cfg():
    return tiny_cfg


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny shapes gain nothing from intra-op threads, and on a shared 2-core box OpenMP spin-waiting
    under oversubscription slowed the training test >10x; restore the setting afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
