"""`precision.backend: native`: fp8 GEMMs on torch._scaled_mm compute what the emulation computes.

CPU torch runs `torch._scaled_mm` for per-tensor and per-row scales, so those recipes are checked
GEMM by GEMM here; 1×128 / 128×128 blocks and the batched `torch._scaled_grouped_mm` exist on
Hopper only and are checked by the `gpu` tests (and by `native_status`'s probe when a model is
built there). The backend itself refuses CPU machines.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from shared.config import ConfigError, load_config
from shared.config.precision import PrecisionConfig
from shared.model.transformer import MoETransformer
from shared.precision import experts as experts_mod
from shared.precision.delayed import DelayedScalingState
from shared.precision.matmul import _LowPrecisionBmm, lp_grouped_linear
from shared.precision.native import NativeFp8Bmm, native_grouped_linear, native_linear, native_status
from shared.precision.native_quant import TENSOR_SCALE_FORMS, quantize_fp8, scale_layout
from shared.precision.recipe import gemm_recipe
from shared.precision.scaling import fake_quantize_batched
from tests.shared.tiny_cuda import train_tiny_on_cuda

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's behaviour")


def _cfg(*overrides):
    return load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])


def _recipe(granularity: str, **extra):
    return gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity=granularity, **extra), "fp8")


def _fwd_bwd(bmm, x, w, dy, recipe, state=None):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = bmm(x, w, recipe, state, "train")
    y.backward(dy)
    return y.detach(), x.grad, w.grad


@no_cuda
def test_native_backend_on_a_cpu_machine_refuses_at_model_build_saying_why():
    cfg = _cfg("model.moe.precision.expert=fp8", "model.moe.precision.backend=native")
    with pytest.raises(RuntimeError, match=r"backend=native, but no CUDA device is visible .*backend=auto"):
        MoETransformer(cfg.model)


def test_native_backend_builds_shape_only_models_anywhere():
    cfg = _cfg("model.moe.precision.expert=fp8", "model.moe.precision.backend=native")
    with torch.device("meta"):
        model = MoETransformer(cfg.model)  # `moelab plan` / `precision-report` never run a GEMM
    assert model.precision_backends["expert"]["backend"] == "native"


@pytest.mark.parametrize("overrides,message", [
    (["expert=nvfp4"], "nvfp4 has no native path"),
    (["expert=fp8", "fp8_granularity=mxfp8"], "mxfp8 needs Blackwell"),
])
def test_native_backend_rejects_recipes_it_has_no_kernel_for_at_config_time(overrides, message):
    items = ["model.moe.precision.backend=native", *(f"model.moe.precision.{o}" for o in overrides)]
    with pytest.raises(ConfigError, match=message):
        _cfg(*items)


@no_cuda
def test_auto_on_a_cpu_machine_emulates_and_records_what_each_faster_backend_lacked(caplog):
    cfg = _cfg("model.moe.precision.expert=fp8")
    with caplog.at_level(logging.INFO, logger="shared.precision.experts"):
        model = MoETransformer(cfg.model)
    choice = model.precision_backends["expert"]
    assert choice["backend"] == "emulate" and choice["mode"] == "fp8"
    assert "transformer-engine:" in choice["why"] and "native: no CUDA device is visible" in choice["why"]
    assert "expert GEMMs in fp8 run on emulate" in caplog.text


def test_auto_picks_native_where_te_cannot_run_and_the_gpu_can(monkeypatch):
    monkeypatch.setattr(experts_mod, "te_status", lambda *a: "transformer-engine is not installed")
    monkeypatch.setattr(experts_mod, "native_status", lambda cfg, mode: None)
    model = MoETransformer(_cfg("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8").model)
    assert model.precision_backends["expert"]["backend"] == "native"
    assert "transformer-engine is not installed" in model.precision_backends["expert"]["why"]
    gmm = model.moe_layers()[0].experts.gmm
    assert gmm.native and not gmm.require_native and "backend=native" in repr(gmm)
    logits, _ = model(torch.randint(0, 256, (2, 16)))  # CPU tensors under auto: the emulation runs them
    logits.sum().backward()
    assert torch.isfinite(model.moe_layers()[0].experts.w1_EFD.grad).all()


def test_auto_keeps_nvfp4_emulated_and_says_so(monkeypatch):
    monkeypatch.setattr(experts_mod, "te_status", lambda *a: "transformer-engine is not installed")
    model = MoETransformer(_cfg("model.moe.precision.expert=nvfp4").model)
    choice = model.precision_backends["expert"]
    assert choice["backend"] == "emulate" and "nvfp4 has no native path" in choice["why"]


@pytest.mark.parametrize("granularity,shape", [("tensor", (40, 72, 96)), ("row", (40, 72, 96)),
                                               ("block", (200, 260, 300)), ("block", (3, 16, 40))])
def test_fp8_operands_hold_exactly_the_values_the_emulation_dequantises(granularity, shape):
    m, n, k = shape
    recipe = _recipe(granularity)
    gen = torch.Generator().manual_seed(0)
    for spec, rows in ((recipe.x, m), (recipe.w, n)):
        t = torch.randn(2, rows, k, generator=gen) * torch.logspace(-2, 2, k)
        want, _ = fake_quantize_batched(t, spec)
        assert torch.equal(quantize_fp8(t, spec).dequantize(), want)


def test_scale_layouts_are_the_ones_torch_scaled_mm_infers_its_scaling_from():
    m, n, k = 256, 384, 512
    x = quantize_fp8(torch.randn(1, m, k), _recipe("block").x)  # 1×128 tiles
    w = quantize_fp8(torch.randn(1, n, k), _recipe("block").w)  # 128×128 blocks
    sa, sb = scale_layout(x, 0, second=False), scale_layout(w, 0, second=True)
    assert sa.shape == (m, k // 128) and sa.stride() == (1, m)  # "outer-dim-major" 1×128
    assert sb.t().shape == (n // 128, k // 128) and sb.t().stride() == (k // 128, 1)  # blocks on b.t()
    g = quantize_fp8(torch.randn(1, n, k), _recipe("block").x)  # 1×128 as the second operand
    sg = scale_layout(g, 0, second=True)
    assert sg.t().shape == (n, k // 128) and sg.t().stride() == (1, n)
    row = quantize_fp8(torch.randn(1, n, k), _recipe("row").w)
    assert scale_layout(row, 0, second=True).shape == (1, n)
    assert scale_layout(quantize_fp8(torch.randn(1, m, k), _recipe("row").x), 0, second=False).shape == (m, 1)


@pytest.mark.parametrize("form", TENSOR_SCALE_FORMS)
def test_every_form_of_a_per_tensor_scale_gives_the_same_product(form):
    # the probe may pick any of these on a GPU; here torch's CPU kernel checks they mean one thing
    m, n, k = 48, 80, 96
    a = quantize_fp8(torch.randn(1, m, k) * 3, _recipe("tensor").x)
    b = quantize_fp8(torch.randn(1, n, k) / 5, _recipe("tensor").w)
    sa, sb = scale_layout(a, 0, False, form), scale_layout(b, 0, True, form)
    assert sa.numel() in (1, m) and sb.numel() in (1, n)
    got = torch._scaled_mm(a.data[0], b.data[0].t(), sa, sb, out_dtype=torch.float32)
    want = a.dequantize()[0] @ b.dequantize()[0].t()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="tensor_form must be one of"):
        scale_layout(a, 0, False, "vector")


@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize("grad_format", ["e4m3", "e5m2"])
def test_native_gemms_equal_the_emulation_forward_and_both_backward_on_cpu(granularity, grad_format):
    recipe = _recipe(granularity, fp8_grad_format=grad_format)
    gen = torch.Generator().manual_seed(1)
    x, w, dy = (torch.randn(2, 40, 96, generator=gen), torch.randn(2, 72, 96, generator=gen),
                torch.randn(2, 40, 72, generator=gen))  # fmt: skip
    got = _fwd_bwd(NativeFp8Bmm.apply, x, w, dy, recipe)
    want = _fwd_bwd(_LowPrecisionBmm.apply, x, w, dy, recipe)
    for name, g, r in zip(("forward", "dgrad", "wgrad"), got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5, msg=name)
    exact = x @ w.transpose(1, 2)
    assert (got[0] - exact).abs().max() > 1e-3  # the operands really were fp8


def test_native_delayed_scaling_moves_the_amax_history_exactly_as_the_emulation():
    from shared.precision.delayed import DelayedParams

    recipe = gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity="tensor", fp8_scaling="delayed",
                                         amax_history_len=4), "fp8")
    native, emulated = DelayedScalingState(2, DelayedParams(4)), DelayedScalingState(2, DelayedParams(4))
    gen = torch.Generator().manual_seed(2)
    for step in range(3):
        x, w = torch.randn(2, 32, 64, generator=gen) * (step + 1), torch.randn(2, 48, 64, generator=gen)
        dy = torch.randn(2, 32, 48, generator=gen)
        got = _fwd_bwd(NativeFp8Bmm.apply, x, w, dy, recipe, native)
        want = _fwd_bwd(_LowPrecisionBmm.apply, x, w, dy, recipe, emulated)
        for g, r in zip(got, want, strict=True):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert torch.equal(native.amax_history, emulated.amax_history) and torch.equal(native.scale, emulated.scale)


@pytest.mark.parametrize("counts", [[5, 0, 17, 9], [40, 1, 1, 1]])  # padded batch / one GEMM per expert
def test_native_grouped_gemm_equals_the_emulated_one_expert_by_expert(counts):
    recipe = _recipe("row")
    gen = torch.Generator().manual_seed(3)
    rows = sum(counts) + 3  # rows past the counts were dropped by capacity: zeros out
    x = torch.randn(rows, 64, generator=gen, requires_grad=True)
    w = torch.randn(len(counts), 48, 64, generator=gen, requires_grad=True)
    y = lp_grouped_linear(x, w, counts, recipe, bmm=NativeFp8Bmm.apply)
    y.square().sum().backward()
    got = (y.detach(), x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    ref = lp_grouped_linear(x, w, counts, recipe)
    ref.square().sum().backward()
    for g, r in zip(got, (ref.detach(), x.grad, w.grad), strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    assert torch.equal(got[0][sum(counts):], torch.zeros(3, 48))


def test_native_wrappers_refuse_cpu_tensors():
    recipe = _recipe("tensor")
    with pytest.raises(RuntimeError, match="native runs fp8 GEMMs on a CUDA GPU"):
        native_linear(torch.randn(4, 16), torch.randn(16, 16), recipe)
    with pytest.raises(RuntimeError, match="native runs fp8 GEMMs on a CUDA GPU"):
        native_grouped_linear(torch.randn(4, 16), torch.randn(2, 16, 16), [2, 2], recipe)


# ---- on a GPU -------------------------------------------------------------------------------------


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


GPU_RECIPES = ["tensor", "row", pytest.param("block", marks=pytest.mark.skipif(not _hopper(), reason="needs sm90"))]


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GPU_RECIPES)
def test_native_status_accepts_the_fp8_recipes_on_this_gpu(granularity):
    assert native_status(PrecisionConfig(expert="fp8", fp8_granularity=granularity), "fp8") is None


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GPU_RECIPES)
def test_native_gemms_match_the_emulation_to_fp8_rounding_on_the_gpu(granularity):
    recipe = _recipe(granularity)
    assert native_status(PrecisionConfig(expert="fp8", fp8_granularity=granularity), "fp8") is None  # as a model build does
    gen = torch.Generator(device="cuda").manual_seed(4)
    x, w, dy = (torch.randn(3, 300, 512, device="cuda", generator=gen).bfloat16(),
                torch.randn(3, 640, 512, device="cuda", generator=gen).bfloat16(),
                torch.randn(3, 300, 640, device="cuda", generator=gen).bfloat16())  # fmt: skip
    got = _fwd_bwd(NativeFp8Bmm.apply, x, w, dy, recipe)
    want = _fwd_bwd(_LowPrecisionBmm.apply, x, w, dy, recipe)
    xf, wf, dyf = x.float(), w.float(), dy.float()
    exact = (xf @ wf.transpose(1, 2), dyf @ wf, dyf.transpose(1, 2) @ xf)
    for name, g, r, e in zip(("forward", "dgrad", "wgrad"), got, want, exact, strict=True):
        fp8_err = float((r.float() - e).norm() / e.norm())  # what fp8 rounding costs
        native_err = float((g.float() - r.float()).norm() / r.float().norm())
        assert native_err < 2.0**-6 and native_err < 0.5 * fp8_err, (name, native_err, fp8_err)


@pytest.mark.gpu
def test_native_delayed_scaling_matches_the_emulation_on_the_gpu():
    from shared.precision.delayed import DelayedParams

    precision = PrecisionConfig(expert="fp8", fp8_granularity="tensor", fp8_scaling="delayed")
    assert native_status(precision, "fp8") is None  # as a model build does: picks the per-tensor scale form
    recipe = gemm_recipe(precision, "fp8")
    states = [DelayedScalingState(2, DelayedParams(16)).cuda() for _ in range(2)]
    for step in range(3):
        x = torch.randn(2, 128, 256, device="cuda") * (step + 1)
        w, dy = torch.randn(2, 256, 256, device="cuda"), torch.randn(2, 128, 256, device="cuda")
        got = _fwd_bwd(NativeFp8Bmm.apply, x, w, dy, recipe, states[0])
        want = _fwd_bwd(_LowPrecisionBmm.apply, x, w, dy, recipe, states[1])
        for g, r in zip(got, want, strict=True):
            assert float((g.float() - r.float()).norm() / r.float().norm()) < 2.0**-6
    torch.testing.assert_close(states[0].amax_history, states[1].amax_history)


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GPU_RECIPES)
def test_native_grouped_experts_match_the_emulation_on_the_gpu(granularity):
    recipe = _recipe(granularity)
    counts = [300, 0, 17, 129, 64, 1, 250, 40]
    x = torch.randn(sum(counts), 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(len(counts), 1024, 512, device="cuda", requires_grad=True)
    outs = []
    for fn in (native_grouped_linear, lp_grouped_linear):
        x.grad = w.grad = None
        y = fn(x, w, counts, recipe)
        y.float().square().mean().backward()
        outs.append((y.detach().float(), x.grad.float(), w.grad.float()))
    for g, r in zip(*outs, strict=True):
        assert float((g - r).norm() / r.norm()) < 2.0**-6


def _train_tiny_on_cuda(*precision: str) -> tuple[list[float], dict]:
    losses, model = train_tiny_on_cuda(*precision, "model.moe.dispatch_backend=grouped_mm")
    return losses, model.precision_backends


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["native", "auto"])
def test_tiny_model_trains_on_native_fp8_as_bf16_does_and_reports_the_backend(backend):
    if backend == "auto" and experts_mod.te_status() is None:
        pytest.skip("transformer-engine is installed here: auto picks te")
    # bf16 first: trained after the fp8 model in one process it went non-finite on an H200, a fault
    # of the bf16 step itself (docs/gpu/README.md) that tests/shared/model/test_cuda_training.py owns
    bf16, _ = _train_tiny_on_cuda()
    fp8, backends = _train_tiny_on_cuda("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8",
                                        f"model.moe.precision.backend={backend}")
    assert backends["expert"]["backend"] == "native" and backends["dense"]["backend"] == "native"
    assert all(math.isfinite(v) for v in fp8)
    # the reference's own progress sets the bar (a first H200 run fell 0.48 in 20 steps at this lr)
    assert bf16[0] - bf16[-1] > 0.2, bf16
    assert fp8[0] - fp8[-1] > 0.8 * (bf16[0] - bf16[-1]), (fp8, bf16)
    assert abs(fp8[-1] - bf16[-1]) < 0.15, (fp8[-1], bf16[-1])


def test_a_refused_faster_expert_path_is_logged_with_its_reason(caplog):
    """The probe's fallbacks (ragged, batched) say why; an agreeing path records nothing."""
    from shared.precision import native

    native.FALLBACK_REASONS.clear()
    assert native.note_fallback(0, "ragged fp8 grouped GEMM", "", "padded expert batches") is False
    assert native.FALLBACK_REASONS == {}
    with caplog.at_level("WARNING", logger="shared.precision.native"):
        assert native.note_fallback(0, "ragged fp8 grouped GEMM", "refused (bad layout)", "padded expert batches")
    assert native.FALLBACK_REASONS == {(0, "ragged fp8 grouped GEMM"): "refused (bad layout)"}
    assert "refused (bad layout); using padded expert batches instead" in caplog.text
    native.FALLBACK_REASONS.clear()
