"""Every dispatch backend agrees with the naive per-token reference, forward and backward (fp32, 1e-5)."""

from __future__ import annotations

import os

import pytest
import torch

from shared.kernels import grouped_mm, moe_experts_forward, route_by_expert
from shared.kernels.reference import naive_moe_experts

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the triton backend runs on CPU through its interpreter

BACKENDS = ["loop", "grouped_mm", "triton", "fused"]
# (tokens, d_model, expert width, experts, top_k): top_k = 1 and top_k = n_experts included.
SHAPES = [(7, 8, 12, 4, 1), (16, 16, 8, 4, 4), (33, 24, 16, 6, 2), (5, 12, 20, 8, 3)]


def _weights(E, F, D, seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: (torch.randn(*s, generator=g) / s[-1] ** 0.5).requires_grad_()  # noqa: E731
    return mk(E, F, D), mk(E, F, D), mk(E, D, F)


def _routing(T, E, K, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(T, E, generator=g)
    if ties:
        scores = scores.round()  # many equal scores: topk must still pick a fixed expert set
    w, idx = scores.softmax(-1).topk(K, dim=-1)
    return idx, w.requires_grad_()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T{}_D{}_F{}_E{}_K{}".format(*s))
@pytest.mark.parametrize("ties", [False, True])
def test_backend_matches_naive_reference_fwd_and_grads(backend, shape, ties):
    T, D, F, E, K = shape
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(1)).requires_grad_()
    w1, w3, w2 = _weights(E, F, D, 2)
    idx, wts = _routing(T, E, K, 3, ties)
    if ties:
        x = x.detach()[:1].expand(T, D).clone().requires_grad_()  # identical tokens too
    ref = naive_moe_experts(x, idx, wts, w1, w3, w2)
    out, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend=backend)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn(T, D, generator=torch.Generator().manual_seed(4))
    inputs = (x, wts, w1, w3, w2)
    grads_ref = torch.autograd.grad(ref, inputs, g)
    grads = torch.autograd.grad(out, inputs, g)
    for name, a, b in zip(["x", "weights", "w1", "w3", "w2"], grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"grad {n}: {m}")


def test_capacity_drops_late_tokens_and_counts_them():
    idx = torch.tensor([[0], [0], [0], [1]])
    routing = route_by_expert(idx, 2, capacity=2)
    assert routing.counts_E.tolist() == [2, 1]
    assert int(routing.dropped) == 1
    assert routing.order_A.tolist() == [0, 1, 3]  # token 2 (third for expert 0) is dropped


@pytest.mark.parametrize("backend", ["loop", "fused"])
def test_dropped_assignment_contributes_zero(backend):
    D, F, E = 8, 8, 2
    x = torch.randn(3, D)
    w1, w3, w2 = (w.detach() for w in _weights(E, F, D, 5))
    idx = torch.tensor([[0], [0], [1]])
    wts = torch.ones(3, 1)
    out, routing = moe_experts_forward(x, idx, wts, w1, w3, w2, backend=backend, capacity=1)
    ref = naive_moe_experts(x, idx, wts, w1, w3, w2)
    assert torch.equal(out[1], torch.zeros(D))
    torch.testing.assert_close(out[[0, 2]], ref[[0, 2]])


@pytest.mark.parametrize("capacity", [1, 3])
def test_fused_matches_loop_with_capacity_idle_experts_and_frozen_inputs(capacity):
    """Drops, experts that get no row (their weight gradients must be zero, not garbage), and
    inputs that need no gradient (the fused backward skips them) all agree with the loop path."""
    T, D, F, E, K = 12, 8, 12, 6, 2
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(11))
    w1, w3, w2 = _weights(E, F, D, 12)
    idx, wts = _routing(T, E, K, 13)
    idx = idx % 4  # experts 4 and 5 get nothing
    idx[:, 1] = (idx[:, 0] + 1) % 4
    for x_grad, wts_grad in [(True, True), (False, True), (True, False)]:
        xi, wi = x.clone().requires_grad_(x_grad), wts.detach().clone().requires_grad_(wts_grad)
        outs, grads = [], []
        for backend in ("loop", "fused"):
            out, routing = moe_experts_forward(xi, idx, wi, w1, w3, w2, backend=backend, capacity=capacity)
            inputs = [t for t in (xi, wi, w1, w3, w2) if t.requires_grad]
            outs.append(out)
            grads.append(torch.autograd.grad(out, inputs, torch.ones_like(out)))
        assert int(routing.dropped) > 0
        torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=1e-5)
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        assert torch.equal(grads[1][-1][4:], torch.zeros_like(grads[1][-1][4:]))


def test_fused_runs_bf16_activations_with_fp32_routing_weights_like_loop():
    T, D, F, E, K = 64, 32, 16, 4, 2
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(18)).bfloat16().requires_grad_()
    w1, w3, w2 = (w.detach().bfloat16().requires_grad_() for w in _weights(E, F, D, 19))
    idx, wts = _routing(T, E, K, 20)  # softmax weights stay fp32
    results = []
    for backend in ("loop", "fused"):
        out, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend=backend)
        results.append((out, *torch.autograd.grad(out.float().sum(), (x, wts, w1, w3, w2))))
    for a, b in zip(*results, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(b.float(), a.float(), atol=0.05, rtol=0.02)


@pytest.mark.parametrize("setting", ["onednn", "mkl"])
def test_fused_on_either_gemm_library_matches_reference_at_a_realistic_size(setting):
    """Per-expert GEMMs big enough for `cpu_gemm` to consider oneDNN (the small shapes above stay on
    torch's `mm`): either library must give the same function and gradients."""
    from shared.kernels.cpu_gemm import onednn_available, use_cpu_gemm

    if setting == "onednn" and not onednn_available():
        pytest.skip("this torch build has no oneDNN matmul")
    T, D, F, E, K = 512, 256, 128, 4, 2
    x = torch.randn(T, D, generator=torch.Generator().manual_seed(14)).requires_grad_()
    w1, w3, w2 = _weights(E, F, D, 15)
    idx, wts = _routing(T, E, K, 16)
    with use_cpu_gemm(setting):
        with torch.profiler.profile() as prof:
            out, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend="fused")
        assert ("mkldnn::_linear_pointwise" in {e.name for e in prof.events()}) == (setting == "onednn")
        ref = naive_moe_experts(x, idx, wts, w1, w3, w2)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
        g = torch.randn(T, D, generator=torch.Generator().manual_seed(17))
        inputs = (x, wts, w1, w3, w2)
        for a, b in zip(torch.autograd.grad(out, inputs, g), torch.autograd.grad(ref, inputs, g), strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_fixed_rules_fuse_on_cpu_for_big_enough_expert_gemms(monkeypatch):
    """Where the path is not measured, `auto` fuses above the multiply-add threshold."""
    from shared.kernels.dispatch import FUSE_MIN_EXPERT_MACS, runs_fused

    monkeypatch.setenv("MOELAB_EXPERT_PATH", "rules")
    x, w1 = torch.randn(4, 512), torch.empty(64, 128, 512)  # 64 experts, width 128, d 512
    big = FUSE_MIN_EXPERT_MACS * 64 // (512 * 128)  # assignments putting one expert's GEMM at the threshold
    assert runs_fused("auto", x, big + 64, w1, grouped_mm) and not runs_fused("auto", x, big, w1, grouped_mm)
    assert runs_fused("fused", x, 4, w1, grouped_mm) and not runs_fused("loop", x, 4 * big, w1, grouped_mm)
    assert not runs_fused("auto", x.to("meta"), 4 * big, w1, grouped_mm)  # not a CPU tensor
    wrapper = lambda x, w, c, b: grouped_mm(x, w, c, b)  # noqa: E731 - a precision wrapper's stand-in
    assert not runs_fused("auto", x, 4 * big, w1, wrapper) and not runs_fused("fused", x, 4, w1, wrapper)
    # A lone grouped GEMM under `fused` (expert parallelism, precision wrappers) runs as `loop`.
    x, w, counts = torch.randn(4, 8), torch.randn(2, 4, 8), torch.tensor([3, 1])
    assert torch.equal(grouped_mm(x, w, counts, "fused"), grouped_mm(x, w, counts, "loop"))


def test_grouped_mm_rejects_bad_shapes_and_backends():
    with pytest.raises(ValueError, match="expects x"):
        grouped_mm(torch.randn(4, 3), torch.randn(2, 5, 4), torch.tensor([2, 2]))
    with pytest.raises(ValueError, match="unknown dispatch backend"):
        grouped_mm(torch.randn(4, 4), torch.randn(2, 5, 4), torch.tensor([2, 2]), backend="cuda-magic")
    with pytest.raises(ValueError, match="16-byte aligned"):
        grouped_mm(torch.randn(4, 3), torch.randn(2, 5, 3), torch.tensor([2, 2]), backend="grouped_mm")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["grouped_mm", "triton"])
def test_gpu_backends_match_loop_in_bf16_and_fp32(backend):
    torch.manual_seed(0)
    T, D, F, E, K = 512, 256, 128, 16, 4
    for dtype, tol in [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)]:
        x = torch.randn(T, D, device="cuda", dtype=dtype, requires_grad=True)
        w1, w3, w2 = (w.detach().cuda().to(dtype).requires_grad_() for w in _weights(E, F, D, 6))
        idx, wts = _routing(T, E, K, 7)
        idx, wts = idx.cuda(), wts.detach().cuda().to(dtype)
        out, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend=backend)
        ref, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend="loop")
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
        g1 = torch.autograd.grad(out.float().sum(), (x, w1, w2))
        g2 = torch.autograd.grad(ref.float().sum(), (x, w1, w2))
        for a, b in zip(g1, g2, strict=True):
            torch.testing.assert_close(a, b, atol=tol * 10, rtol=tol)


@pytest.mark.parametrize("backend", ["loop", "auto", "fused"])
def test_experts_run_through_a_swappable_grouped_mm(backend):
    from shared.model.experts import RoutedExperts

    experts = RoutedExperts(4, 8, 8, backend=backend)
    calls = []

    def counting_gmm(x, w, counts, backend):
        calls.append(tuple(w.shape))
        return grouped_mm(x, w, counts, backend)

    experts.gmm = counting_gmm
    idx, wts = _routing(6, 4, 2, 8)
    experts(torch.randn(6, 8), idx, wts)
    assert calls == [(4, 16, 8), (4, 8, 8)]  # fused w1|w3, then w2


@pytest.mark.parametrize("capacity", [None, 2])
def test_unpermute_combine_weights_unweighted_expert_outputs(capacity):
    from shared.kernels import expert_swiglu, permute, unpermute_combine

    T, D, F, E, K = 9, 8, 8, 4, 2
    x = torch.randn(T, D)
    w1, w3, w2 = (w.detach() for w in _weights(E, F, D, 9))
    idx, wts = _routing(T, E, K, 10)
    wts = wts.detach()
    routing = route_by_expert(idx, E, capacity)
    y = expert_swiglu(permute(x, routing, K), w1, w3, w2, routing.counts_E, "loop")
    out_ref, _ = moe_experts_forward(x, idx, wts, w1, w3, w2, backend="loop", capacity=capacity)
    torch.testing.assert_close(unpermute_combine(y, routing, wts), out_ref, atol=1e-6, rtol=1e-5)
