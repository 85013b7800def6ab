"""CPU GEMMs on MKL or oneDNN: same products as torch's `mm` in fp32, any strides, differentiable."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shared.kernels import cpu_gemm, gemm_autotune
from shared.kernels.cpu_gemm import Linear, addmm_nt_, cpu_gemm_setting, linear, mm_nt, use_cpu_gemm

needs_onednn = pytest.mark.skipif(not cpu_gemm.onednn_available(), reason="this torch build has no oneDNN matmul")


@pytest.fixture(autouse=True)
def _isolated_autotune(tmp_path, monkeypatch):
    monkeypatch.setenv("MOELAB_HOME", str(tmp_path))
    gemm_autotune.TUNER.reset()
    yield
    gemm_autotune.TUNER.reset()


def _ops_run(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.events()}


@needs_onednn
@pytest.mark.parametrize("setting", ["onednn", "mkl"])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_mm_nt_matches_float64_like_torch_mm_for_any_strides(setting, transpose_a, transpose_b):
    g = torch.Generator().manual_seed(0)
    m, k, n = 300, 256, 96
    a = torch.randn(k, m, generator=g).t() if transpose_a else torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g).t() if transpose_b else torch.randn(n, k, generator=g)
    ref = a.double() @ b.double().t()
    with use_cpu_gemm(setting):
        ran = _ops_run(lambda: mm_nt(a, b))
        ours = mm_nt(a, b)
    assert ("mkldnn::_linear_pointwise" in ran) == (setting == "onednn")
    err_mkl = (torch.mm(a, b.t()).double() - ref).abs().max()
    assert ours.dtype == torch.float32 and ours.shape == (m, n)
    assert (ours.double() - ref).abs().max() <= 4 * err_mkl + 1e-5  # fp32 accumulation, as good as MKL's


@needs_onednn
@pytest.mark.parametrize("setting", ["onednn", "mkl"])
def test_mm_nt_into_out_and_addmm_accumulate_in_place(setting):
    g = torch.Generator().manual_seed(3)
    a, b, c0 = torch.randn(256, 128, generator=g), torch.randn(192, 128, generator=g), torch.randn(256, 192, generator=g)
    out = torch.empty(2, 256, 192)
    with use_cpu_gemm(setting):
        returned = mm_nt(a, b, out=out[1])
        c = c0.clone()
        assert addmm_nt_(c, a, b) is c
    assert returned.data_ptr() == out[1].data_ptr()
    torch.testing.assert_close(out[1], a @ b.t(), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(c, c0 + a @ b.t(), atol=1e-4, rtol=1e-5)


def test_tiny_products_and_other_dtypes_stay_on_torch_mm():
    a, b = torch.randn(8, 16), torch.randn(4, 16)
    with use_cpu_gemm("onednn"):
        ops = _ops_run(lambda: mm_nt(a, b))
        big = torch.randn(512, 512, dtype=torch.float64)
        assert torch.equal(mm_nt(big, big), torch.mm(big, big.t()))
    assert "mkldnn::_linear_pointwise" not in ops and "aten::mm" in ops
    assert gemm_autotune.TUNER.measured == 0


@needs_onednn
@pytest.mark.parametrize("setting", ["onednn", "auto"])
def test_linear_forward_and_gradients_match_f_linear(setting):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 256, 128, generator=g, requires_grad=True)
    w = torch.randn(192, 128, generator=g, requires_grad=True)
    dy = torch.randn(4, 256, 192, generator=g)
    with use_cpu_gemm(setting):
        ours = linear(x, w)
        frozen = linear(x.detach(), w)  # no input gradient asked: only the weight's is computed
        ref = F.linear(x, w)
        torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-5)
        ref_grads = torch.autograd.grad(ref, (x, w), dy)
        for a, b in zip(torch.autograd.grad(ours, (x, w), dy), ref_grads, strict=True):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-5)
        (dw,) = torch.autograd.grad(frozen, (w,), dy)
    torch.testing.assert_close(dw, ref_grads[1], atol=1e-3, rtol=1e-5)


def test_linear_is_plain_f_linear_when_every_gemm_is_mkl():
    """No custom autograd node, no extra Python, when MKL runs all three GEMMs (as on a machine
    where the autotune chose it everywhere)."""
    x = torch.randn(512, 256, requires_grad=True)
    w = torch.randn(256, 256, requires_grad=True)
    with use_cpu_gemm("mkl"):
        y = linear(x, w)
        assert cpu_gemm.linear_libraries(512, w) == ("mkl", "mkl", "mkl")
    assert type(y.grad_fn).__name__ == "MmBackward0"


@needs_onednn
def test_linear_runs_each_gemm_on_its_own_library():
    """The forward, input-gradient and weight-gradient GEMMs are separate shape classes; a choice
    of oneDNN for one of them alone sends only that one to oneDNN."""
    x = torch.randn(1024, 256, requires_grad=True)
    w = torch.randn(512, 256, requires_grad=True)
    tuner = gemm_autotune.TUNER
    for cls in (gemm_autotune.ShapeClass.of(1024, 256, 512, "rr"), gemm_autotune.ShapeClass.of(1024, 512, 256, "rc"),
                gemm_autotune.ShapeClass.of(512, 1024, 256, "cc")):
        tuner.force(cls, "mkl")
    tuner.force(gemm_autotune.ShapeClass.of(512, 1024, 256, "cc"), "onednn")  # the weight gradient only
    assert cpu_gemm.linear_libraries(1024, w) == ("mkl", "mkl", "onednn")
    y = linear(x, w)
    with torch.profiler.profile() as prof:
        y.backward(torch.ones_like(y))
    names = [e.name for e in prof.events()]
    assert names.count("mkldnn::_linear_pointwise") == 1 and "aten::mm" in names
    torch.testing.assert_close(w.grad, torch.ones(1024, 512).t() @ x.detach(), atol=1e-3, rtol=1e-5)


def test_setting_is_explicit_and_checked(monkeypatch):
    with use_cpu_gemm("mkl"):
        assert cpu_gemm_setting() == "mkl"
        a = torch.randn(512, 512)
        assert "mkldnn::_linear_pointwise" not in _ops_run(lambda: mm_nt(a, a))
    with pytest.raises(ValueError, match="unknown CPU GEMM setting"), use_cpu_gemm("blis"):
        pass
    monkeypatch.setattr(cpu_gemm, "_setting", "openblas")
    with pytest.raises(ValueError, match="MOELAB_CPU_GEMM='openblas'"):
        cpu_gemm_setting()


def test_linear_module_is_a_bias_free_nn_linear_with_the_same_state():
    layer = Linear(64, 32)
    assert isinstance(layer, torch.nn.Linear) and layer.bias is None
    assert list(layer.state_dict()) == ["weight"]
    x = torch.randn(5, 64)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight))


@needs_onednn
@pytest.mark.slow  # an inductor compile: ~10 s on 2 cores
def test_linear_compiles_with_inductor_through_the_plain_op():
    """Inductor's lowering of `_linear_pointwise` wants weights it packed itself, so under
    `torch.compile` `linear` traces `F.linear` instead (a trainer run with train.compile=true
    failed before this)."""
    x = torch.randn(64, 256, requires_grad=True)
    w = torch.randn(128, 256, requires_grad=True)
    compiled = torch.compile(lambda a, b: linear(a, b).relu())
    with use_cpu_gemm("onednn"):
        out = compiled(x, w)
    ref = F.linear(x, w).relu()
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)
    out.sum().backward()
    assert x.grad is not None and w.grad is not None
