"""torchtitan, the MoE-layer benchmark's second peer, computes our function in our dtype: its
output matches ours as closely as HF's does (not to bf16 rounding), so the timing compares like with like."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchtitan", reason="the bench extra: pip install -e '.[bench]'")


def test_torchtitan_layer_matches_ours_to_fp32_rounding_without_bf16_casts():
    from benchmarks.moe_layer import build_ours, build_torchtitan

    ours = build_ours(64, 8, 32, 2, 1, "loop")
    tt = build_torchtitan(ours, 64)
    x = torch.randn(1, 256, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (tt(x) - ours(x)[0]).abs().max().item()
    assert diff < 1e-5  # with torchtitan's bf16 casts it was ~1e-2
    experts = tt.routed_experts.inner_experts
    assert type(experts).__name__ == "FP32GroupedExperts" and experts.w1_EFD.dtype == torch.float32
