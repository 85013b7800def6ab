"""Emulated low-precision GEMMs: quantised operands in forward and both backward GEMMs."""

from __future__ import annotations

import pytest
import torch

from shared.config.precision import PrecisionConfig
from shared.precision import fake_quantize, gemm_recipe, lp_grouped_linear, lp_grouped_matmul, lp_linear


def _expert_layer(x, w_up, w_down, counts, recipe):
    """A SwiGLU-free two-GEMM expert block (up, SiLU, down) over tokens sorted by expert."""
    h = torch.nn.functional.silu(lp_grouped_matmul(x, w_up, counts, recipe))
    return lp_grouped_matmul(h, w_down, counts, recipe)


@pytest.mark.parametrize("mode,tol", [("fp8", 0.08), ("nvfp4", 0.35)])
def test_grads_flow_through_emulated_experts_close_to_bf16(mode, tol):
    torch.manual_seed(0)
    counts = [40, 0, 70, 18]
    x = torch.randn(sum(counts), 64)
    w_up = (torch.randn(4, 64, 96) / 8).requires_grad_()
    w_down = (torch.randn(4, 96, 64) / 10).requires_grad_()
    target = torch.randn(sum(counts), 64)

    def run(recipe):
        xx = x.clone().requires_grad_()
        w_up.grad = w_down.grad = None
        y = _expert_layer(xx, w_up, w_down, counts, recipe)
        ((y - target) ** 2).mean().backward()
        return y.detach(), xx.grad, w_up.grad.clone(), w_down.grad.clone()

    ref = run(gemm_recipe(PrecisionConfig(expert="bf16", emulate_bf16=True)))
    low = run(gemm_recipe(PrecisionConfig(expert=mode)))
    for name, a, b in zip(("y", "dx", "dw_up", "dw_down"), low, ref, strict=True):
        assert a.shape == b.shape and torch.isfinite(a).all(), name
        rel = ((a - b).norm() / b.norm()).item()
        assert rel < tol, f"{mode} {name}: relative error {rel:.3f} vs bf16"
        assert rel > 1e-4, f"{mode} {name}: identical to bf16, so nothing was quantised"
    assert (low[2][1] == 0).all(), "an expert that got no tokens gets a zero gradient"


def test_both_backward_gemms_use_quantised_operands():
    torch.manual_seed(1)
    cfg = PrecisionConfig(expert="fp8", fp8_granularity="block", fp8_grad_format="e5m2")
    r = gemm_recipe(cfg)
    x = torch.randn(130, 256, requires_grad=True)
    w = torch.randn(200, 256, requires_grad=True)
    y = lp_linear(x, w, r)
    dy = torch.randn_like(y)
    y.backward(dy)
    q = lambda t, spec: fake_quantize(t, spec)[0]  # noqa: E731
    torch.testing.assert_close(y, q(x, r.x) @ q(w, r.w).t())
    torch.testing.assert_close(x.grad, q(dy, r.grad) @ q(w.t(), r.w).t())  # Dgrad: along N
    torch.testing.assert_close(w.grad, q(dy.t(), r.grad) @ q(x.t().contiguous(), r.x).t())  # Wgrad: along tokens
    assert not torch.allclose(x.grad, dy @ w.detach(), rtol=1e-3, atol=1e-3)


def test_nvfp4_hadamard_on_wgrad_leaves_forward_untouched_and_stays_close():
    torch.manual_seed(2)
    x = torch.randn(64, 32, requires_grad=True)
    w = torch.randn(48, 32, requires_grad=True)
    grads = {}
    for had in ("off", "wgrad"):
        r = gemm_recipe(PrecisionConfig(expert="nvfp4", hadamard=had, nvfp4_grad_stochastic=False))
        x.grad = w.grad = None
        y = lp_linear(x, w, r)
        y.sum().backward()
        grads[had] = (y.detach(), w.grad.clone(), x.grad.clone())
    torch.testing.assert_close(grads["off"][0], grads["wgrad"][0])
    torch.testing.assert_close(grads["off"][2], grads["wgrad"][2])
    exact = torch.ones(64, 48).t() @ x.detach()
    for had in ("off", "wgrad"):
        assert (grads[had][1] - exact).norm() / exact.norm() < 0.3
    assert not torch.equal(grads["off"][1], grads["wgrad"][1])


def test_plain_bf16_recipe_is_the_unquantised_linear():
    r = gemm_recipe(PrecisionConfig())
    assert not r.active
    x, w = torch.randn(5, 8), torch.randn(3, 8)
    assert torch.equal(lp_linear(x, w, r), torch.nn.functional.linear(x, w))


def test_grouped_matmul_checks_counts():
    with pytest.raises(ValueError, match="one entry per expert"):
        lp_grouped_matmul(torch.randn(5, 4), torch.randn(2, 4, 3), [2, 2, 1], gemm_recipe(PrecisionConfig(expert="fp8")))


def test_grouped_linear_matches_the_kernels_layout_and_zeroes_dropped_rows():
    from shared.kernels import grouped_mm

    x, w, counts = torch.randn(9, 16), torch.randn(3, 8, 16), torch.tensor([4, 0, 3])
    recipe = gemm_recipe(PrecisionConfig(expert="bf16", emulate_bf16=True))
    y = lp_grouped_linear(x, w, counts, recipe)
    ref = grouped_mm(x, w, counts, "loop")
    torch.testing.assert_close(y, ref, rtol=2e-2, atol=2e-2)
    assert (y[7:] == 0).all()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(expert="fp8", fp8_granularity="tensor"),
        dict(expert="fp8", fp8_granularity="block"),
        dict(expert="fp8", fp8_granularity="mxfp8", fp8_grad_format="e5m2"),
        dict(expert="nvfp4", nvfp4_grad_stochastic=False),  # RHT on the Wgrad inputs
        dict(expert="nvfp4", nvfp4_grad_stochastic=False, hadamard="all", nvfp4_weight_2d=False),
        dict(expert="bf16", emulate_bf16=True),
    ],
    ids=lambda o: "-".join(str(v) for v in o.values()),
)
@pytest.mark.parametrize("counts", [[40, 0, 70, 18], [30, 25, 33, 40]], ids=["per-expert", "padded-batch"])
def test_grouped_gemm_equals_one_linear_per_expert(overrides, counts):
    """The batched grouped GEMM (groups zero-padded to the longest) and the per-expert path give
    each expert's own lp_linear: padding changes no scale, no tile and no Hadamard block."""
    torch.manual_seed(3)
    recipe = gemm_recipe(PrecisionConfig(**overrides))
    x = torch.randn(sum(counts) + 5, 64, requires_grad=True)  # 5 rows dropped by capacity
    w = (torch.randn(4, 96, 64) / 8).requires_grad_()
    dy = torch.randn(sum(counts) + 5, 96)
    y = lp_grouped_linear(x, w, counts, recipe)
    y.backward(dy)
    got = (y.detach(), x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    outs, start = [], 0
    for e, c in enumerate(counts):
        if c:
            outs.append(lp_linear(x[start : start + c], w[e], recipe))
        start += c
    ref_y = torch.cat([*outs, x.new_zeros(5, 96)])
    ref_y.backward(dy)
    for name, a, b in zip(("y", "dx", "dw"), got, (ref_y.detach(), x.grad, w.grad), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
    assert (got[0][-5:] == 0).all() and (got[1][-5:] == 0).all()
