"""MLA's one-pass head assembly computes what the split / rotate / concatenate form computes, both ways."""

from __future__ import annotations

import pytest
import torch

from shared.model.attention.mla_heads import mla_heads, mla_heads_reference
from shared.model.rope import RotaryEmbedding


def _inputs(nope: int, rope: int, dv: int, dtype=torch.float32, B=2, T=12, H=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    # the layouts the module hands over: views of the projections' outputs, not contiguous copies
    q_BTHk = torch.randn(B, T, H * (nope + rope), generator=g).to(dtype).view(B, T, H, nope + rope)
    kv_BTHm = torch.randn(B, T, H * (nope + dv), generator=g).to(dtype).view(B, T, H, nope + dv)
    latent = torch.randn(B, T, 5 + rope, generator=g).to(dtype)
    k_rope_BTr = latent[..., 5:]
    cos, sin = RotaryEmbedding(rope, 32).half_tables(T)
    return q_BTHk, kv_BTHm, k_rope_BTr, cos, sin


def _leaves(*ts):
    """Fresh leaves with the same strides (a clone of a view keeps its layout)."""
    return [t.detach().clone().requires_grad_() for t in ts]


@pytest.mark.parametrize("pad_v", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("nope,rope,dv", [(8, 4, 6), (8, 4, 12), (6, 6, 16)], ids=["v-narrower", "v-equal", "v-wider"])
def test_same_heads_and_gradients_as_the_tensor_op_form(nope, rope, dv, pad_v):
    q_in, kv_in, kr_in, cos, sin = _inputs(nope, rope, dv)
    ours_in, ref_in = _leaves(q_in, kv_in, kr_in), _leaves(q_in, kv_in, kr_in)
    ours = mla_heads(*ours_in, cos, sin, nope, pad_v)
    ref = mla_heads_reference(*ref_in, cos, sin, nope, pad_v)
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # values padded only where narrower, and only when asked
    assert ours[2].shape[-1] == (max(nope + rope, dv) if pad_v else dv)
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(t.shape, generator=g) for t in ours]
    torch.autograd.backward(ours, grads)
    torch.autograd.backward(ref, grads)
    for a, b in zip(ours_in, ref_in, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("pad_v", [True, False], ids=["padded", "unpadded"])
def test_an_unused_output_gets_no_gradient_and_breaks_nothing(pad_v):
    q_in, kv_in, kr_in, cos, sin = _inputs(8, 4, 6)
    ours_in, ref_in = _leaves(q_in, kv_in, kr_in), _leaves(q_in, kv_in, kr_in)
    mla_heads(*ours_in, cos, sin, 8, pad_v)[1].sum().backward()  # only k reaches the loss
    mla_heads_reference(*ref_in, cos, sin, 8, pad_v)[1].sum().backward()
    assert ref_in[0].grad is None and ours_in[0].grad.abs().max() == 0  # the queries did not take part
    for a, b in zip(ours_in[1:], ref_in[1:], strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-5)


def test_bf16_inputs_are_rotated_in_fp32_like_the_module_rope():
    q_in, kv_in, kr_in, cos, sin = _inputs(8, 4, 6, dtype=torch.bfloat16)
    ours = mla_heads(*_leaves(q_in, kv_in, kr_in), cos, sin, 8)
    ref = mla_heads_reference(*_leaves(q_in, kv_in, kr_in), cos, sin, 8)
    for a, b in zip(ours, ref, strict=True):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a, b, rtol=0, atol=0)
