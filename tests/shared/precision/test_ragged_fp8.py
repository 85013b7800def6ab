"""The ragged fp8 grouped GEMM (per-row recipe) computes what the emulation computes, in the layout
`torch._scaled_grouped_mm` accepts, with quantisers that fuse under torch.compile.

CPU torch has no `_scaled_grouped_mm` kernel, so the numerics run through its fp32 reference
(`ragged.reference_scaled_grouped_mm`) and the layouts through torch's meta registration of the
kernel, which repeats the CUDA kernel's checks (dtypes, row/column-major operands, 16-byte
strides, scale shapes, int32 offsets).
"""

from __future__ import annotations

import pytest
import torch

from shared.config.precision import PrecisionConfig
from shared.precision.formats import E4M3, E5M2
from shared.precision.fused_quant import quantize_group_columns, quantize_rows
from shared.precision.matmul import lp_grouped_linear
from shared.precision.native_quant import quantize_fp8
from shared.precision.ragged import aligned_layout, reference_scaled_grouped_mm
from shared.precision.ragged_fp8 import ragged_fp8_grouped_linear, ragged_supports
from shared.precision.recipe import gemm_recipe
from shared.precision.scaling import QuantSpec

ROW = gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity="row"), "fp8")


def _fwd_bwd(fn, x, w, dy):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = fn(x, w)
    y.backward(dy)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("fmt", [E4M3, E5M2])
def test_fused_row_quantiser_gives_the_emulations_fp8_bits(fmt):
    t = torch.randn(3, 40, 96) * torch.logspace(-3, 3, 40)[None, :, None]
    t[1, 5] = 0  # an all-zero row keeps scale 1
    q, s = quantize_rows(t, fmt)
    ref = quantize_fp8(t, QuantSpec(fmt, (1, -1)))
    assert torch.equal(q.view(torch.uint8), ref.data.view(torch.uint8))
    assert torch.equal(s, ref.scale[..., 0]) and s[1, 5] == 1


def test_group_column_quantiser_scales_each_experts_tokens_on_their_own():
    counts = [5, 0, 19]
    t = torch.randn(sum(counts) + 3, 32)
    t[5:24] *= 1000  # expert 2's tokens are large: expert 0's scales must not see them
    group = torch.repeat_interleave(torch.arange(4), torch.tensor([*counts, 3]))  # 3 = rows of no group
    q, s = quantize_group_columns(t, group, 3, E4M3)
    start = 0
    for e, c in enumerate(counts):
        if c:
            ref = quantize_fp8(t[start : start + c].t()[None], QuantSpec(E4M3, (1, -1)))  # along the tokens
            assert torch.equal(q[start : start + c].t().view(torch.uint8), ref.data[0].view(torch.uint8))
            assert torch.equal(s[e], ref.scale[0, :, 0])
        start += c
    assert torch.equal(s[1], torch.ones(32))  # an expert with no tokens: scale 1


def test_quantisers_compile_into_one_graph_without_breaks():
    import torch._dynamo

    torch._dynamo.reset()
    t = torch.randn(48, 64)
    group = torch.repeat_interleave(torch.arange(3), torch.tensor([16, 16, 16]))
    for fn, args in ((quantize_rows, (t, E4M3)), (quantize_group_columns, (t, group, 2, E4M3))):
        explained = torch._dynamo.explain(fn)(*args)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=True)
        for got, want in zip(compiled(*args), fn(*args), strict=True):
            assert torch.equal(got.view(torch.uint8) if got.dtype != torch.float32 else got,
                               want.view(torch.uint8) if want.dtype != torch.float32 else want)


def test_aligned_layout_starts_every_group_on_16_rows_without_reading_the_counts_on_the_host():
    counts = torch.tensor([5, 0, 33, 16])
    layout = aligned_layout(counts, 60)  # 54 rows in groups, 6 dropped by capacity
    assert layout.offs.dtype == torch.int32 and layout.offs.tolist() == [16, 16, 64, 80]
    assert layout.padded_rows % 16 == 0 and layout.padded_rows >= 60 + 15 * 4
    x = torch.arange(60.0)[:, None].expand(60, 2)
    buf = layout.scatter(x)
    assert buf[:5, 0].tolist() == list(range(5)) and not buf[5:16].any()  # expert 0, then its padding
    assert buf[16:49, 0].tolist() == list(range(5, 38)) and buf[64:80, 0].tolist() == list(range(38, 54))
    assert torch.equal(layout.group_of_row[:80], torch.repeat_interleave(torch.tensor([0, 2, 3]), torch.tensor([16, 48, 16])))
    assert (layout.group_of_row[80:] == 4).all() and (layout.dest[54:] >= 80).all()  # dropped rows: the tail
    back = layout.gather(buf)
    assert torch.equal(back[:54], x[:54]) and not back[54:].any()
    with torch.device("meta"):  # no .tolist() anywhere: the layout builds on a device that holds no values
        assert aligned_layout(torch.zeros(4, dtype=torch.long), 60).padded_rows == layout.padded_rows


def test_the_reference_kernel_leaves_what_the_gpu_kernel_does_not_write_as_nan():
    counts = torch.tensor([16, 0, 32])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    a = torch.randn(64, 32).to(torch.float8_e4m3fn)
    b = torch.randn(3, 48, 32).to(torch.float8_e4m3fn)
    y = reference_scaled_grouped_mm(a, b.transpose(1, 2), torch.ones(64), torch.ones(3, 48), offs)
    assert torch.isnan(y[48:]).all() and not torch.isnan(y[:48]).any()
    assert torch.allclose(y[16:48], a[16:48].float() @ b[2].float().t())
    dw = reference_scaled_grouped_mm(a.t().contiguous(), a.float().to(torch.float8_e4m3fn), torch.ones(96),
                                     torch.ones(96), offs)
    assert torch.isnan(dw[1]).all() and not torch.isnan(dw[0]).any()


@pytest.mark.parametrize("counts", [[5, 0, 21, 3], [16, 16, 16, 16], [0, 0, 40, 0]])
def test_ragged_path_matches_the_emulation_in_forward_dgrad_and_wgrad(counts):
    gen = torch.Generator().manual_seed(sum(counts))
    rows = sum(counts) + 4  # the last 4 rows were dropped by capacity
    x, w = torch.randn(rows, 32, generator=gen), torch.randn(4, 48, 32, generator=gen)
    dy = torch.randn(rows, 48, generator=gen)
    got = _fwd_bwd(lambda a, b: ragged_fp8_grouped_linear(a, b, torch.tensor(counts), ROW), x, w, dy)
    want = _fwd_bwd(lambda a, b: lp_grouped_linear(a, b, counts, ROW), x, w, dy)
    for name, g, r in zip(("forward", "dgrad", "wgrad"), got, want, strict=True):
        assert torch.isfinite(g).all(), name  # nothing the kernel leaves unwritten is read
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-5 * float(r.abs().max())), name
    assert not got[0][sum(counts):].any() and not got[1][sum(counts):].any()


def test_ragged_call_satisfies_the_scaled_grouped_mm_kernels_own_checks():
    meta = torch.device("meta")
    x = torch.empty(100, 64, device=meta, requires_grad=True)
    w = torch.empty(4, 96, 64, device=meta, requires_grad=True)
    y = ragged_fp8_grouped_linear(x, w, torch.zeros(4, dtype=torch.long, device=meta), ROW)
    y.backward(torch.empty(100, 96, device=meta))  # Dgrad (2-D × 3-D) and Wgrad (2-D × 2-D) pass them too
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
    a = torch.empty(32, 64, device=meta, dtype=torch.float8_e4m3fn)
    b_row_major = torch.empty(4, 64, 96, device=meta, dtype=torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="column major"):  # the checks are live: a wrong layout fails
        torch._scaled_grouped_mm(a, b_row_major, torch.empty(32, device=meta), torch.empty(4, 96, device=meta),
                                 offs=torch.empty(4, dtype=torch.int32, device=meta), out_dtype=torch.bfloat16)


def test_ragged_path_refuses_what_it_does_not_run():
    assert ragged_supports(ROW, 96, 64) is None
    block = gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity="block"), "fp8")
    assert "per-row" in ragged_supports(block, 96, 64)
    e5m2 = gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity="row", fp8_grad_format="e5m2"), "fp8")
    assert "e4m3" in ragged_supports(e5m2, 96, 64)
    assert "divisible by 16" in ragged_supports(ROW, 96, 40)
    with pytest.raises(ValueError, match="per-row"):
        ragged_fp8_grouped_linear(torch.randn(4, 64), torch.randn(2, 32, 64), [2, 2], block)


def _gpu_problem():
    counts = [300, 0, 17, 129, 64, 1, 250, 40]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(sum(counts) + 7, 512, device="cuda", generator=gen).bfloat16()  # 7 rows dropped by capacity
    w = torch.randn(len(counts), 1024, 512, device="cuda", generator=gen)
    dy = torch.randn(x.shape[0], 1024, device="cuda", generator=gen).bfloat16()
    return counts, x, w, dy


def _rel(got, want) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


@pytest.mark.gpu
def test_ragged_path_on_the_gpu_matches_the_emulation_to_fp8_rounding():
    counts, x, w, dy = _gpu_problem()
    got = _fwd_bwd(lambda a, b: ragged_fp8_grouped_linear(a, b, torch.tensor(counts, device="cuda"), ROW), x, w, dy)
    want = _fwd_bwd(lambda a, b: lp_grouped_linear(a, b, counts, ROW), x, w, dy)
    for name, g, r in zip(("forward", "dgrad", "wgrad"), got, want, strict=True):
        assert torch.isfinite(g).all() and _rel(g, r) < 2.0**-6, name  # same fp8 values: bf16 output rounding only
    assert not got[0][sum(counts):].any() and not got[2][1].any()  # dropped rows, the empty expert


@pytest.mark.gpu
def test_torchao_path_on_the_gpu_is_as_close_to_the_exact_product_as_ours():
    pytest.importorskip("torchao")
    from shared.precision.torchao_backend import torchao_grouped_linear

    counts, x, w, dy = _gpu_problem()
    exact = _fwd_bwd(lambda a, b: lp_grouped_linear(a.float(), b, counts, gemm_recipe(PrecisionConfig(), "bf16")),
                     x, w, dy.float())
    ours = _fwd_bwd(lambda a, b: ragged_fp8_grouped_linear(a, b, torch.tensor(counts, device="cuda"), ROW), x, w, dy)
    theirs = _fwd_bwd(lambda a, b: torchao_grouped_linear(a, b, torch.tensor(counts, device="cuda")), x, w, dy)
    for i, name in enumerate(("forward", "dgrad", "wgrad")):
        # power-of-two scales round differently from ours, at fp8's own error; a wrong layout is off by O(1)
        assert _rel(theirs[i], exact[i]) < 2 * _rel(ours[i], exact[i]) + 2.0**-6, name
    assert not theirs[2][1].any() and not theirs[0][sum(counts):].any()
