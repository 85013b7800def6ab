"""Expert counts without host syncs equal bincount; the gather-sum combine is deterministic and
equals the index_add combine (forward and gradients)."""

from __future__ import annotations

import pytest
import torch

from shared.kernels import moe_experts_forward, route_by_expert
from shared.kernels.dispatch import combine_method, permute, unpermute_sum
from shared.kernels.histogram import expert_histogram
from shared.kernels.reference import naive_moe_experts


@pytest.mark.parametrize("shape", [(1, 1), (37, 3), (256, 8), (5, 4)])
@pytest.mark.parametrize("E", [4, 16, 64])
def test_expert_histogram_equals_bincount(shape, E):
    g = torch.Generator().manual_seed(E + shape[0])
    idx = torch.randint(0, E, shape, generator=g)
    counts = expert_histogram(idx, E)
    assert counts.dtype == torch.int64 and counts.shape == (E,)
    assert torch.equal(counts, torch.bincount(idx.reshape(-1), minlength=E))


def test_expert_histogram_keeps_its_length_for_unused_and_empty_experts():
    assert torch.equal(expert_histogram(torch.zeros(0, 2, dtype=torch.long), 5), torch.zeros(5, dtype=torch.long))
    assert torch.equal(expert_histogram(torch.tensor([[0, 0]]), 3), torch.tensor([2, 0, 0]))


def test_expert_histogram_traces_without_graph_breaks():
    explanation = torch._dynamo.explain(lambda i: expert_histogram(i, 8) * 2)(torch.randint(0, 8, (32, 2)))
    assert explanation.graph_break_count == 0
    explanation = torch._dynamo.explain(lambda i: torch.bincount(i.reshape(-1), minlength=8) * 2)(
        torch.randint(0, 8, (32, 2)))
    assert explanation.graph_break_count > 0  # what the histogram replaced


def _case(T=29, D=12, F=8, E=6, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, D, generator=g, requires_grad=True)
    w1, w3 = (torch.randn(E, F, D, generator=g).div(D ** 0.5).requires_grad_() for _ in range(2))
    w2 = torch.randn(E, D, F, generator=g).div(F ** 0.5).requires_grad_()
    w, idx = torch.randn(T, E, generator=g).softmax(-1).topk(K, dim=-1)
    return x, idx, w.requires_grad_(), w1, w3, w2


def _run(case, combine, capacity=None):
    x, idx, w, w1, w3, w2 = case
    for t in (x, w, w1, w3, w2):
        t.grad = None
    out, _ = moe_experts_forward(x, idx, w, w1, w3, w2, backend="loop", capacity=capacity, combine=combine)
    out.square().sum().backward()
    return out.detach().clone(), [t.grad.clone() for t in (x, w, w1, w3, w2)]


@pytest.mark.parametrize("capacity", [None, 4])
def test_gather_combine_equals_index_add_combine_forward_and_grads(capacity):
    case = _case()
    out_a, grads_a = _run(case, "index_add", capacity)
    out_g, grads_g = _run(case, "gather", capacity)
    torch.testing.assert_close(out_g, out_a, rtol=1e-6, atol=1e-6)
    for ga, gg in zip(grads_a, grads_g, strict=True):
        torch.testing.assert_close(gg, ga, rtol=1e-5, atol=1e-6)


def test_gather_combine_matches_the_naive_reference():
    x, idx, w, w1, w3, w2 = _case(seed=3)
    out, _ = moe_experts_forward(x, idx, w, w1, w3, w2, backend="loop", combine="gather")
    torch.testing.assert_close(out, naive_moe_experts(x, idx, w, w1, w3, w2), rtol=1e-5, atol=1e-5)


def test_gather_combine_is_bitwise_deterministic_in_bf16():
    case = tuple(t.detach().to(torch.bfloat16).requires_grad_() if t.is_floating_point() else t for t in _case(T=64))
    first = _run(case, "gather")
    for _ in range(3):
        again = _run(case, "gather")
        assert torch.equal(again[0], first[0])
        assert all(torch.equal(a, b) for a, b in zip(again[1], first[1], strict=True))


def test_gather_combine_sums_each_tokens_slots_in_slot_order():
    """out[t] = y[slot t·K] + y[slot t·K+1] + ... in that order, whatever the experts' order."""
    T, K, D = 5, 2, 3
    idx = torch.tensor([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]])
    routing = route_by_expert(idx, 2)
    y_AD = torch.arange(T * K * D, dtype=torch.float32).view(T * K, D)
    out = unpermute_sum(y_AD, routing, T, K, "gather")
    y_S = torch.empty_like(y_AD)
    y_S[routing.order_A] = y_AD
    assert torch.equal(out, y_S.view(T, K, D)[:, 0] + y_S.view(T, K, D)[:, 1])


def test_permute_backward_by_gather_equals_index_add():
    x = torch.randn(9, 4, requires_grad=True)
    idx = torch.randint(0, 3, (9, 2), generator=torch.Generator().manual_seed(1))
    routing = route_by_expert(idx, 3, capacity=4)
    g = torch.randn(routing.order_A.numel(), 4)
    grads = []
    for method in ("index_add", "gather"):
        x.grad = None
        (permute(x, routing, 2, method) * g).sum().backward()
        grads.append(x.grad.clone())
    torch.testing.assert_close(grads[1], grads[0])


def test_combine_method_by_device_and_rejects_unknown():
    assert combine_method(torch.device("cpu")) == "index_add"
    assert combine_method(torch.device("cuda")) == "gather"
    assert combine_method(torch.device("cpu"), "gather") == "gather"
    with pytest.raises(ValueError, match="unknown combine"):
        combine_method(torch.device("cpu"), "atomic")
