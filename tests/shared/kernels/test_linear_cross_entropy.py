"""The fused LM head + cross-entropy: the plain path's loss and gradients, without its N×V logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.kernels.linear_cross_entropy import linear_cross_entropy


def _inputs(n=300, d=24, v=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(n, d, generator=g) * 2).requires_grad_()
    w = (torch.randn(v, d, generator=g) * 0.3).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    return h, w, y


@pytest.mark.parametrize("chunk_rows", [1, 64, 128, 299, 300, 4096])
def test_loss_and_gradients_match_the_plain_path(chunk_rows):
    h, w, y = _inputs()
    ref = F.cross_entropy(F.linear(h, w), y)
    ref_dh, ref_dw = torch.autograd.grad(ref, (h, w))
    loss = linear_cross_entropy(h, w, y, chunk_rows=chunk_rows)
    dh, dw = torch.autograd.grad(loss, (h, w))
    torch.testing.assert_close(loss, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(dh, ref_dh, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(dw, ref_dw, atol=1e-7, rtol=1e-5)


def test_upstream_gradient_scales_both_gradients():
    h, w, y = _inputs(seed=1)
    ref_dh, ref_dw = torch.autograd.grad(F.cross_entropy(F.linear(h, w), y) * 3.5 + h.sum(), (h, w))
    dh, dw = torch.autograd.grad(linear_cross_entropy(h, w, y, chunk_rows=50) * 3.5 + h.sum(), (h, w))
    torch.testing.assert_close(dh, ref_dh, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(dw, ref_dw, atol=1e-6, rtol=1e-5)


def test_non_finite_upstream_gradient_reaches_the_gradients():
    """The trainer's NaN fault injection multiplies the loss by NaN: its gradients must be NaN too."""
    h, w, y = _inputs(seed=2)
    (linear_cross_entropy(h, w, y) * float("nan")).backward()
    assert torch.isnan(h.grad).all() and torch.isnan(w.grad).all()


def test_only_the_needed_gradient_is_computed():
    h, w, y = _inputs(seed=3)
    w_frozen = w.detach()
    loss = linear_cross_entropy(h, w_frozen, y)
    (dh,) = torch.autograd.grad(loss, (h,))
    torch.testing.assert_close(dh, torch.autograd.grad(F.cross_entropy(F.linear(h, w_frozen), y), (h,))[0],
                               atol=1e-7, rtol=1e-5)


def test_without_gradients_it_returns_the_loss_only():
    h, w, y = _inputs(seed=4)
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, y, chunk_rows=32)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, F.cross_entropy(F.linear(h, w), y).detach(), atol=1e-6, rtol=1e-6)


def test_extreme_logits_stay_finite():
    """Logits of ±1e4 neither overflow nor lose the target's term: most targets' probabilities
    underflow to zero there, and their rows' loss comes from the recomputed log-sum-exp."""
    h, w, y = _inputs(n=40, seed=5)
    h = (h.detach() * 3000).requires_grad_()
    logits = F.linear(h, w)
    y = torch.where(torch.arange(len(y)) % 2 == 0, logits.argmax(1), y)  # every other row's target is its top logit
    underflowing = (logits.log_softmax(1).gather(1, y.unsqueeze(1)) < -100).sum()
    assert 0 < underflowing < len(y)  # both kinds of row are in the test
    ref = F.cross_entropy(logits, y)
    ref_dh, = torch.autograd.grad(ref, (h,))
    loss = linear_cross_entropy(h, w, y, chunk_rows=16)
    dh, = torch.autograd.grad(loss, (h,))
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(dh, ref_dh, rtol=1e-5, atol=1e-6)


def _plain_low_precision(h, w, y):
    return F.cross_entropy(F.linear(h, w).float(), y)


@pytest.mark.parametrize("chunk_rows", [64, 150, 299, None])
def test_bf16_inputs_run_blocked_with_the_plain_paths_loss_and_gradients(monkeypatch, chunk_rows):
    import shared.kernels.linear_cross_entropy as lce

    made = []
    real_mm = torch.mm
    monkeypatch.setattr(lce.torch, "mm", lambda a, b, **kw: made.append(a.shape[0]) or real_mm(a, b, **kw))
    h, w, y = _inputs(seed=6)
    hb, wb = h.detach().bfloat16().requires_grad_(), w.detach().bfloat16().requires_grad_()
    ref = _plain_low_precision(hb, wb, y)
    ref_dh, ref_dw = torch.autograd.grad(ref, (hb, wb))
    made.clear()
    loss = linear_cross_entropy(hb, wb, y, chunk_rows=chunk_rows)
    dh, dw = torch.autograd.grad(loss, (hb, wb))
    assert made and max(made) <= (chunk_rows or 300)  # no block of logits taller than asked
    assert loss.dtype == torch.float32 and dh.dtype == dw.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-5)  # same bf16 logits, same fp32 softmax
    torch.testing.assert_close(dh, ref_dh, atol=1e-4, rtol=2e-2)
    torch.testing.assert_close(dw, ref_dw, atol=1e-4, rtol=2e-2)  # one bf16 rounding per block


def test_fp32_inputs_under_autocast_run_the_low_precision_form_with_fp32_gradients():
    h, w, y = _inputs(seed=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = _plain_low_precision(h, w, y)
    ref_dh, ref_dw = torch.autograd.grad(ref, (h, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, y, chunk_rows=100)
    dh, dw = torch.autograd.grad(loss, (h, w))
    assert dh.dtype == dw.dtype == torch.float32
    torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dh, ref_dh, atol=1e-4, rtol=2e-2)
    torch.testing.assert_close(dw, ref_dw, atol=1e-4, rtol=2e-2)


def test_low_precision_blocks_hold_at_most_a_gib_of_fp32_logits():
    from shared.kernels.linear_cross_entropy import LOW_PRECISION_BLOCK_BYTES, low_precision_block_rows

    assert low_precision_block_rows(131_072) == 2048
    assert low_precision_block_rows(131_072) * 131_072 * 4 <= LOW_PRECISION_BLOCK_BYTES
    assert low_precision_block_rows(10**9) == 64


def test_bad_shapes_and_targets_are_refused():
    h, w, y = _inputs(seed=7)
    with pytest.raises(ValueError, match="expects h"):
        linear_cross_entropy(h, w[:, :5], y)
    with pytest.raises(ValueError, match="expects h"):
        linear_cross_entropy(h, w, y[:10])
    with pytest.raises(IndexError, match=r"targets must lie in \[0, 97\)"):
        linear_cross_entropy(h, w, torch.full_like(y, 97))


def test_model_loss_with_targets_equals_cross_entropy_of_its_logits():
    from shared.config import load_config
    from shared.model import MoETransformer

    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.max_seq_len=16"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 17), generator=torch.Generator().manual_seed(1))
    logits, _ = model(tokens[:, :-1])
    ref = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    ref_grads = torch.autograd.grad(ref, list(model.parameters()), allow_unused=True)
    none, aux = model(tokens[:, :-1], tokens[:, 1:])
    assert none is None
    torch.testing.assert_close(aux["lm_loss"], ref, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(aux["lm_loss"], list(model.parameters()), allow_unused=True)
    for (name, _), a, b in zip(model.named_parameters(), grads, ref_grads, strict=True):
        if b is None:
            assert a is None, name
        else:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)


def test_the_kept_logits_block_does_not_leak_between_calls():
    """The logits block is reused from call to call: a second call of the same shape (and one of
    another shape in between) must leave the first call's loss and gradients untouched."""
    h1, w1, y1 = _inputs(seed=1)
    h2, w2, y2 = _inputs(seed=2)
    h3, w3, y3 = _inputs(n=50, v=31, seed=3)
    refs = [torch.autograd.grad(F.cross_entropy(F.linear(h, w), y), (h, w)) for h, w, y in ((h1, w1, y1), (h2, w2, y2))]
    first = linear_cross_entropy(h1, w1, y1, chunk_rows=64)
    second = linear_cross_entropy(h2, w2, y2, chunk_rows=64)
    linear_cross_entropy(h3, w3, y3, chunk_rows=64).backward()
    for loss, (h, w, y), (ref_dh, ref_dw) in zip((first, second), ((h1, w1, y1), (h2, w2, y2)), refs, strict=True):
        torch.testing.assert_close(loss, F.cross_entropy(F.linear(h, w), y), atol=1e-6, rtol=1e-6)
        dh, dw = torch.autograd.grad(loss, (h, w))
        torch.testing.assert_close(dh, ref_dh, atol=1e-7, rtol=1e-5)
        torch.testing.assert_close(dw, ref_dw, atol=1e-7, rtol=1e-5)
