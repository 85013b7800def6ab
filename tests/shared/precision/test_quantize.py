"""Quantise → dequantise: error bounds per granularity, the NVFP4 layout, stochastic rounding."""

from __future__ import annotations

import pytest
import torch

from shared.precision.formats import BF16, E2M1, E4M3, E5M2, round_to_format
from shared.precision.hadamard import hadamard_last_dim, random_hadamard
from shared.precision.scaling import QuantSpec, expand_scales, fake_quantize

GRANULARITIES = {
    "tensor": ((-1, -1), "fp32"),
    "row": ((1, -1), "fp32"),
    "1x128": ((1, 128), "fp32"),
    "128x128": ((128, 128), "fp32"),
    "mxfp8_1x32": ((1, 32), "e8m0"),
}


def _heavy_tailed(rows=256, cols=384, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * torch.exp(torch.randn(rows, 1, generator=gen) * 2)
    x[3, 5] = 900.0  # an outlier, to separate the granularities
    return x


def _assert_within_bound(x, q, scales, spec):
    """|q − x| ≤ 2^-(m+1)·|x| + ½·subnormal step·scale: round-to-nearest on a scaled grid."""
    s = expand_scales(scales, tuple(x.shape), spec.block)
    bound = spec.fmt.half_ulp_rel * x.abs() + 0.5 * spec.fmt.subnormal_step * s
    excess = (q - x).abs() - bound * (1 + 1e-6)
    assert excess.max() <= 0, f"{spec}: error exceeds the format bound by {excess.max():.3g}"


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
@pytest.mark.parametrize("gran", list(GRANULARITIES))
def test_fp8_round_trip_error_within_format_bound(fmt, gran):
    block, kind = GRANULARITIES[gran]
    x = _heavy_tailed()
    spec = QuantSpec(fmt, block, kind)
    q, scales = fake_quantize(x, spec)
    _assert_within_bound(x, q, scales, spec)
    assert q.shape == x.shape and torch.isfinite(q).all()


def test_finer_scales_lose_less_than_a_tensor_scale_on_heavy_tails():
    x = _heavy_tailed()
    err = {g: (fake_quantize(x, QuantSpec(E4M3, *GRANULARITIES[g]))[0] - x).norm() / x.norm() for g in GRANULARITIES}
    assert err["1x128"] < err["tensor"] and err["row"] < err["tensor"]


@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
def test_nvfp4_round_trip_error_within_e2m1_bound(block):
    x = _heavy_tailed(cols=160)
    spec = QuantSpec(E2M1, block, "nvfp4")
    q, scales = fake_quantize(x, spec)
    _assert_within_bound(x, q, scales, spec)
    assert scales.shape == (256 // block[0], 160 // 16)


def test_nvfp4_hand_example_block_layout_and_scales():
    # Two 16-element blocks. Tensor amax 12 -> fp32 tensor scale 12 / (6·448) = 1/224.
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([12.0, 5.0, 0.7, -1.1])  # block 0: amax 12
    x[0, 16:19] = torch.tensor([1.0, 0.3, -0.1])  # block 1: amax 1
    q, scales = fake_quantize(x, QuantSpec(E2M1, (1, 16), "nvfp4"))
    # block 0: 12/6 = 2 -> 2·224 = 448, exactly e4m3 -> scale 2.0
    # block 1: 1/6 · 224 = 37.33 -> e4m3 grid in [32, 64) has step 4 -> 36 -> scale 36/224
    assert scales.shape == (1, 2)
    torch.testing.assert_close(scales, torch.tensor([[2.0, 36 / 224]]))
    # block 0 values/2 = [6, 2.5, 0.35, -0.55] -> e2m1 [6, 2 (tie to even), 0.5, -0.5]
    torch.testing.assert_close(q[0, :4], torch.tensor([12.0, 4.0, 1.0, -1.0]))
    # block 1 values/(36/224) = [6.22 (saturates to 6), 1.87 -> 2, -0.62 -> -0.5]
    s1 = 36 / 224
    torch.testing.assert_close(q[0, 16:19], torch.tensor([6 * s1, 2 * s1, -0.5 * s1]))
    assert (q[0, 4:16] == 0).all() and (q[0, 19:] == 0).all()


@pytest.mark.parametrize(
    "fmt,value", [(E4M3, 0.3), (E5M2, 0.3), (E2M1, 2.6), (E2M1, 0.2), (BF16, 1.0 + 2**-9)], ids=str
)
def test_stochastic_rounding_is_unbiased(fmt, value):
    gen = torch.Generator().manual_seed(1)
    x = torch.full((200_000,), value)
    r = round_to_format(x, fmt, stochastic=True, generator=gen)
    nearest = round_to_format(x[:1], fmt)
    assert len(r.unique()) == 2, "stochastic rounding must pick one of the two neighbours"
    spacing = (r.max() - r.min()).item()
    tolerance = 5 * 0.5 * spacing / len(x) ** 0.5  # five standard errors of a Bernoulli mean
    assert abs(r.mean().item() - value) < tolerance
    assert abs(nearest.item() - value) > 4 * tolerance, "the test value must be one nearest rounding gets wrong"


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_stochastic_grid_matches_torch_float8_grid(fmt):
    x = torch.randn(10_000) * 30
    r = round_to_format(x, fmt, stochastic=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(r, r.to(fmt.torch_dtype).float()), "every stochastic result must be an exact fp8 value"
    down, up = torch.minimum(r, x), torch.maximum(r, x)
    assert ((up - down) <= 2 * fmt.half_ulp_rel * x.abs() + fmt.subnormal_step).all()


def test_e2m1_nearest_grid_is_the_nvfp4_value_set():
    values = round_to_format(torch.linspace(-7, 7, 2001), E2M1).unique()
    expected = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    torch.testing.assert_close(values, torch.cat([-expected.flip(0)[:-1], expected]))


def test_random_hadamard_is_orthogonal_and_preserves_products():
    t = random_hadamard(16, seed=3)
    torch.testing.assert_close(t @ t.t(), torch.eye(16), atol=1e-6, rtol=0)
    a, b = torch.randn(8, 40), torch.randn(5, 40)
    torch.testing.assert_close(hadamard_last_dim(a, 16, 3) @ hadamard_last_dim(b, 16, 3).t(), a @ b.t(), atol=1e-4, rtol=1e-4)


def test_fake_quantize_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D operand"):
        fake_quantize(torch.randn(2, 3, 4), QuantSpec(E4M3))


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=lambda f: f.name)
def test_nearest_rounding_is_bit_identical_to_torch_float8_casts(fmt):
    """Every finite fp8 value, every midpoint (ties to even) and its neighbours, random values
    from subnormal to saturating: our grid rounding equals torch's cast of the clamped value."""
    grid = torch.arange(256, dtype=torch.uint8).view(fmt.torch_dtype).float()
    grid = grid[torch.isfinite(grid)].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    up, down = torch.tensor(float("inf")), torch.tensor(float("-inf"))
    x = torch.cat([grid, mids, mids.nextafter(up), mids.nextafter(down), torch.randn(100_000) * torch.logspace(-12, 6, 100_000, base=2)])
    x = torch.cat([x, -x, torch.tensor([1e9, -1e9, 0.0])])
    expected = x.clamp(-fmt.max, fmt.max).to(fmt.torch_dtype).float()
    assert torch.equal(round_to_format(x, fmt), expected)
