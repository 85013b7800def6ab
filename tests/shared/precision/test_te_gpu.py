"""transformer-engine's hardware fp8 / nvfp4 GEMMs agree with our emulation on the same inputs."""

from __future__ import annotations

import pytest
import torch

from shared.config.precision import PrecisionConfig
from shared.precision import gemm_recipe, lp_linear
from shared.precision.te_backend import te_available, te_linear

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "mode,granularity", [("fp8", "tensor"), ("fp8", "block"), ("fp8", "mxfp8"), ("nvfp4", "block")]
)
def test_te_expert_gemm_matches_emulation(mode, granularity):
    if not te_available():
        pytest.skip("transformer-engine not installed")
    major = torch.cuda.get_device_capability()[0]
    if (granularity == "mxfp8" or mode == "nvfp4") and major < 10:
        pytest.skip("MXFP8 / NVFP4 need Blackwell (sm_100+)")
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(384, 512, device="cuda") / 512**0.5).bfloat16()
    cfg = PrecisionConfig(expert=mode, fp8_granularity=granularity, hadamard="off", nvfp4_grad_stochastic=False)
    te_y = te_linear(x, w, cfg, mode).float()
    emu_y = lp_linear(x.float(), w.float(), gemm_recipe(cfg))
    exact = x.float() @ w.float().t()
    emu_err = ((emu_y - exact).norm() / exact.norm()).item()
    te_err = ((te_y - exact).norm() / exact.norm()).item()
    # same formats and scales: the two quantised results sit as close to each other as to the exact one
    assert ((te_y - emu_y).norm() / exact.norm()).item() < 1.5 * emu_err + 0.01
    assert abs(te_err - emu_err) < 0.5 * emu_err + 0.01, (te_err, emu_err)
