"""RoPE: rotations keep norms, and q·k depends only on the distance between positions."""

from __future__ import annotations

import pytest
import torch

from shared.model.rope import RotaryEmbedding


def test_rope_preserves_norm_and_position_zero():
    rope = RotaryEmbedding(16, 32)
    x = torch.randn(2, 3, 32, 16)
    y = rope(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :])


def test_rope_dot_product_depends_only_on_relative_position():
    rope = RotaryEmbedding(8, 64)
    q, k = torch.randn(8), torch.randn(8)
    qs = rope(q.expand(64, 8).clone())
    ks = rope(k.expand(64, 8).clone())
    torch.testing.assert_close(qs[10] @ ks[7], qs[40] @ ks[37], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(qs[10] @ ks[7], qs[10] @ ks[3])


def test_rope_rejects_sequences_longer_than_the_cache():
    with pytest.raises(ValueError, match="max_seq_len"):
        RotaryEmbedding(8, 4)(torch.randn(5, 8))
