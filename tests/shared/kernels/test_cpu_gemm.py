"""CPU GEMMs through oneDNN: same products as torch's `mm` in fp32, any strides, differentiable."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.kernels import cpu_gemm
from shared.kernels.cpu_gemm import Linear, cpu_gemm_library, linear, mm_nt, use_cpu_gemm

needs_onednn = pytest.mark.skipif(not cpu_gemm.onednn_available(), reason="this torch build has no oneDNN matmul")


def _ops_run(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.events()}


@needs_onednn
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_mm_nt_matches_float64_like_torch_mm_for_any_strides(transpose_a, transpose_b):
    g = torch.Generator().manual_seed(0)
    m, k, n = 300, 256, 96
    a = torch.randn(k, m, generator=g).t() if transpose_a else torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g).t() if transpose_b else torch.randn(n, k, generator=g)
    ref = a.double() @ b.double().t()
    with use_cpu_gemm("onednn"):
        assert "mkldnn::_linear_pointwise" in _ops_run(lambda: mm_nt(a, b))
        ours = mm_nt(a, b)
    err_mkl = (torch.mm(a, b.t()).double() - ref).abs().max()
    assert ours.dtype == torch.float32 and ours.shape == (m, n)
    assert (ours.double() - ref).abs().max() <= 4 * err_mkl + 1e-5  # fp32 accumulation, as good as MKL's


def test_tiny_products_and_other_dtypes_stay_on_torch_mm():
    a, b = torch.randn(8, 16), torch.randn(4, 16)
    ops = _ops_run(lambda: mm_nt(a, b))
    assert "mkldnn::_linear_pointwise" not in ops and "aten::mm" in ops
    big = torch.randn(512, 512, dtype=torch.float64)
    assert torch.equal(mm_nt(big, big), torch.mm(big, big.t()))


@needs_onednn
def test_linear_forward_and_gradients_match_f_linear():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 256, 128, generator=g, requires_grad=True)
    w = torch.randn(192, 128, generator=g, requires_grad=True)
    dy = torch.randn(4, 256, 192, generator=g)
    ours = linear(x, w)
    ref = F.linear(x, w)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-5)
    ref_grads = torch.autograd.grad(ref, (x, w), dy)
    for a, b in zip(torch.autograd.grad(ours, (x, w), dy), ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-5)
    frozen = linear(x.detach(), w)  # no input gradient asked: only the weight's is computed
    (dw,) = torch.autograd.grad(frozen, (w,), dy)
    torch.testing.assert_close(dw, ref_grads[1], atol=1e-3, rtol=1e-5)


def test_linear_module_is_a_bias_free_nn_linear_with_the_same_state():
    layer = Linear(64, 32)
    assert isinstance(layer, torch.nn.Linear) and layer.bias is None
    assert list(layer.state_dict()) == ["weight"]
    x = torch.randn(5, 64)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight))


def test_library_choice_is_explicit_and_checked(monkeypatch):
    with use_cpu_gemm("mkl"):
        assert cpu_gemm_library() == "mkl"
        a = torch.randn(512, 512)
        assert "mkldnn::_linear_pointwise" not in _ops_run(lambda: mm_nt(a, a))
    with pytest.raises(ValueError, match="unknown CPU GEMM library"), use_cpu_gemm("blis"):
        pass
    monkeypatch.setattr(cpu_gemm, "_choice", "openblas")
    with pytest.raises(ValueError, match="MOELAB_CPU_GEMM='openblas'"):
        cpu_gemm_library()


@needs_onednn
@pytest.mark.slow  # an inductor compile: ~10 s on 2 cores
def test_linear_compiles_with_inductor_through_the_plain_op():
    """Inductor's lowering of `_linear_pointwise` wants weights it packed itself, so under
    `torch.compile` `linear` traces `F.linear` instead (a trainer run with train.compile=true
    failed before this)."""
    x = torch.randn(64, 256, requires_grad=True)
    w = torch.randn(128, 256, requires_grad=True)
    compiled = torch.compile(lambda a, b: linear(a, b).relu())
    out = compiled(x, w)
    ref = F.linear(x, w).relu()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)
    out.sum().backward()
    assert x.grad is not None and w.grad is not None
