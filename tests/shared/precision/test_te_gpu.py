"""transformer-engine's hardware fp8 / nvfp4 GEMMs agree with our emulation on the same inputs.

Tolerances. Both sides quantise the same operands with the same formats and scale granularity,
so each carries a quantisation error of the same size ε = ‖emulated − exact‖ / ‖exact‖ (measured
per case, ~3–6% for fp8 e4m3, ~10–15% for nvfp4). If TE quantises exactly as the emulation, the
two differ only by TE's bf16 inputs and outputs and accumulation order (≲ 2^-8 ≈ 0.4%; we allow
0.01); if the two round some elements differently (e.g. a scale computed with a different
reciprocal) the difference is bounded by the two errors' sum. We require ‖te − emu‖ ≤ 1.5ε + 0.01
and |ε_te − ε| ≤ 0.5ε + 0.01: a wrong recipe (another format, a coarser scale, a missing
Hadamard or 2-D weight block) changes ε_te by far more than half. Stochastic rounding and the
random Hadamard transform (TE's sign pattern is not ours) are switched off so both sides are
deterministic. MXFP8 and NVFP4 need Blackwell (sm_100+); on an H200 those cases skip.
"""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.config.precision import PrecisionConfig
from shared.precision import gemm_recipe, lp_grouped_linear, lp_linear
from shared.precision.delayed import DelayedScalingState
from shared.precision.te_backend import (
    TELinearRunner,
    te_available,
    te_grouped_linear,
    te_linear,
    te_recipe,
    te_status,
)

pytestmark = pytest.mark.gpu

CASES = [("fp8", "tensor"), ("fp8", "block"), ("fp8", "mxfp8"), ("nvfp4", "block")]


def _skip_unless_supported(mode: str, granularity: str) -> None:
    """Skip with TE's own reason when the installed TE or this GPU cannot run the recipe."""
    if not te_available():
        pytest.skip("transformer-engine not installed")
    reason = te_status(PrecisionConfig(expert=mode, fp8_granularity=granularity), mode)
    if reason:
        pytest.skip(reason)


def _cfg(mode, granularity, **kw):
    return PrecisionConfig(
        expert=mode, fp8_granularity=granularity, hadamard="off", nvfp4_grad_stochastic=False, backend="te", **kw
    )


def _assert_close_to_emulation(te_t, emu_t, exact, name):
    emu_err = ((emu_t - exact).norm() / exact.norm()).item()
    te_err = ((te_t - exact).norm() / exact.norm()).item()
    diff = ((te_t - emu_t).norm() / exact.norm()).item()
    assert diff < 1.5 * emu_err + 0.01, f"{name}: te vs emulation {diff:.4f}, emulation error {emu_err:.4f}"
    assert abs(te_err - emu_err) < 0.5 * emu_err + 0.01, f"{name}: te error {te_err:.4f} vs emulation {emu_err:.4f}"


@pytest.mark.parametrize("mode,granularity", CASES)
def test_te_linear_matches_emulation(mode, granularity):
    _skip_unless_supported(mode, granularity)
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(384, 512, device="cuda") / 512**0.5).bfloat16()
    cfg = _cfg(mode, granularity)
    te_y = te_linear(x, w, cfg, mode).float()
    emu_y = lp_linear(x.float(), w.float(), gemm_recipe(cfg))
    _assert_close_to_emulation(te_y, emu_y, x.float() @ w.float().t(), "y")


@pytest.mark.parametrize("mode,granularity", CASES)
def test_te_expert_grouped_gemm_output_and_grads_match_emulation(mode, granularity):
    """The `gmm` seam on TE: uneven expert counts (one empty, none aligned) and capacity-dropped rows."""
    _skip_unless_supported(mode, granularity)
    torch.manual_seed(1)
    counts = [200, 0, 77, 131]
    n_rows = sum(counts) + 9
    x0 = torch.randn(n_rows, 256, device="cuda")
    w0 = torch.randn(4, 384, 256, device="cuda") / 16
    dy = torch.randn(n_rows, 384, device="cuda")
    cfg = _cfg(mode, granularity)

    def run(fn):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        y = fn(x, w)
        y.backward(dy)
        return y.detach().float(), x.grad.float(), w.grad.float()

    te_out = run(lambda x, w: te_grouped_linear(TELinearRunner(cfg, mode), (384, 256), x, w, counts))
    emu_out = run(lambda x, w: lp_grouped_linear(x, w, counts, gemm_recipe(cfg)))
    exact = run(lambda x, w: lp_grouped_linear(x, w, counts, gemm_recipe(PrecisionConfig())))
    for name, t, e, ex in zip(("y", "dx", "dw"), te_out, emu_out, exact, strict=True):
        assert torch.isfinite(t).all(), name
        _assert_close_to_emulation(t, e, ex, name)
    assert (te_out[0][sum(counts) :] == 0).all(), "capacity-dropped rows give zeros"
    assert (te_out[2][1] == 0).all(), "an expert without tokens gets a zero gradient"


def test_te_delayed_scaling_tracks_the_emulated_history():
    """Same inputs for a few steps: TE's DelayedScaling and our emulated history use the same stale scales."""
    _skip_unless_supported("fp8", "tensor")
    torch.manual_seed(2)
    cfg = _cfg("fp8", "tensor", fp8_scaling="delayed", amax_history_len=4)
    runner, recipe = TELinearRunner(cfg, "fp8"), gemm_recipe(cfg)
    state = DelayedScalingState(1, recipe.delayed).cuda()
    w = (torch.randn(128, 256, device="cuda") / 16).requires_grad_()
    for step in range(4):
        x = torch.randn(64, 256, device="cuda") * (1 + step)
        with torch.autocast("cuda", enabled=False):
            te_y = runner.linear("site", x, w).float()
            te_y.sum().backward()
            emu_y = lp_linear(x, w, recipe, state)
            emu_y.sum().backward()
        _assert_close_to_emulation(te_y.detach(), emu_y.detach(), (x @ w.t()).detach(), f"step {step}")


def test_te_recipe_maps_our_knobs():
    if not te_available():
        pytest.skip("transformer-engine not installed")
    from transformer_engine.common import recipe as te_r

    delayed = te_recipe(_cfg("fp8", "tensor", fp8_scaling="delayed", amax_history_len=16, fp8_margin=1), "fp8")
    assert isinstance(delayed, te_r.DelayedScaling)
    assert (delayed.amax_history_len, delayed.margin, delayed.amax_compute_algo) == (16, 1, "max")
    assert delayed.fp8_format == te_r.Format.E4M3
    block = te_recipe(_cfg("fp8", "block", fp8_grad_format="e5m2"), "fp8")
    assert block.fp8_format == te_r.Format.HYBRID and not block.fp8_quant_fwd_inp.power_2_scale
    nvfp4 = te_recipe(PrecisionConfig(expert="nvfp4"), "nvfp4")
    assert not (nvfp4.disable_rht or nvfp4.disable_stochastic_rounding or nvfp4.disable_2d_quantization)


@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_tiny_model_with_te_backend_trains_with_finite_loss(scaling):
    _skip_unless_supported("fp8", "tensor")
    from shared.model.transformer import MoETransformer

    cfg = load_config(
        "configs/tiny.yaml",
        ["model.moe.precision.backend=te", "model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8",
         "model.moe.precision.fp8_granularity=tensor", f"model.moe.precision.fp8_scaling={scaling}"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = MoETransformer(cfg.model).cuda()
    assert all(layer.experts.gmm.te is not None for layer in model.moe_layers())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator(device="cuda").manual_seed(0)
    losses = []
    for _ in range(5):
        tokens = torch.randint(0, cfg.model.vocab_size, (4, 129), device="cuda", generator=gen)
        opt.zero_grad()
        logits, aux = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        (loss + aux["aux_loss"]).backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))), losses
    grads = [p.grad for p in model.moe_layers()[0].experts.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
