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


def test_rope_matches_the_rotate_half_form_and_its_gradient_on_strided_inputs():
    """The one-node RoPE (half by half, nothing saved but the tables) against x·cos + rotate_half(x)·sin,
    on a slice of a wider projection as MLA passes it."""
    from shared.model.rope import rope_frequencies, rotate_half

    rope = RotaryEmbedding(16, 64)
    wide = torch.randn(2, 40, 3, 48, requires_grad=True)
    x = wide.transpose(1, 2)[..., 32:]  # (B, H, T, 16) view with strides of the (B, T, H, 48) tensor
    cos, sin = rope_frequencies(16, 64)
    ref = x * cos[:40] + rotate_half(x) * sin[:40]
    ours = rope(x)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)
    dy = torch.randn(ours.shape)
    (g_ours,) = torch.autograd.grad(ours, wide, dy)
    (g_ref,) = torch.autograd.grad(ref, wide, dy)
    torch.testing.assert_close(g_ours, g_ref, atol=1e-6, rtol=1e-5)
