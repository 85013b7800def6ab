"""Triton grouped GEMM for expert dispatch (forward, input-grad and weight-grad kernels).

Why our own kernel: `torch._grouped_mm` needs aligned strides and a recent GPU; Triton gives one
portable kernel we can read, tune and (under `TRITON_INTERPRET=1`) test on CPU. The layout follows
the usual "persistent tile list" scheme of grouped GEMMs (e.g. MegaBlocks, Gale et al. 2022,
arXiv:2211.15841): each expert's rows are cut into BLOCK_M tiles; tile → expert is found on the
device with `searchsorted`, so launching needs no host sync. The grid is an upper bound
(`cdiv(T, BLOCK_M) + E` row tiles); tiles past the last expert do nothing.

Accumulation is fp32; fp32 inputs use IEEE products (no TF32) so results match the reference to
1e-5, bf16 inputs use the tensor cores.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_M = 32
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def _gmm_kernel(
    x_ptr, w_ptr, y_ptr, tile_expert_ptr, tile_start_ptr, row_start_ptr, counts_ptr,
    E, N, K,
    sx_m, sx_k, sw_e, sw_k, sw_n, sy_m, sy_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(tile_expert_ptr + pid_m)
    if e < E:
        local = pid_m - tl.load(tile_start_ptr + e)
        first = tl.load(row_start_ptr + e)
        row_end = first + tl.load(counts_ptr + e)
        rm = first + local * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(
                x_ptr + rm[:, None] * sx_m + rk[None, :] * sx_k,
                mask=(rm[:, None] < row_end) & (rk[None, :] < K), other=0.0,
            )
            b = tl.load(
                w_ptr + e * sw_e + rk[:, None] * sw_k + rn[None, :] * sw_n,
                mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0,
            )
            if IEEE:
                acc += tl.dot(a, b, input_precision="ieee")
            else:
                acc += tl.dot(a, b)
        tl.store(
            y_ptr + rm[:, None] * sy_m + rn[None, :] * sy_n,
            acc.to(y_ptr.dtype.element_ty),
            mask=(rm[:, None] < row_end) & (rn[None, :] < N),
        )


@triton.jit
def _wgrad_kernel(
    dy_ptr, x_ptr, dw_ptr, row_start_ptr, counts_ptr,
    n_out, n_in,
    sdy_m, sdy_o, sx_m, sx_i, sdw_e, sdw_o, sdw_i,
    BLOCK_O: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_R: tl.constexpr, IEEE: tl.constexpr,
):
    e = tl.program_id(0)
    ro = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    ri = tl.program_id(2) * BLOCK_I + tl.arange(0, BLOCK_I)
    first = tl.load(row_start_ptr + e)
    count = tl.load(counts_ptr + e)
    acc = tl.zeros((BLOCK_O, BLOCK_I), dtype=tl.float32)
    for r0 in range(0, count, BLOCK_R):
        rr = r0 + tl.arange(0, BLOCK_R)
        a = tl.load(
            dy_ptr + (first + rr)[None, :] * sdy_m + ro[:, None] * sdy_o,
            mask=(rr[None, :] < count) & (ro[:, None] < n_out), other=0.0,
        )
        b = tl.load(
            x_ptr + (first + rr)[:, None] * sx_m + ri[None, :] * sx_i,
            mask=(rr[:, None] < count) & (ri[None, :] < n_in), other=0.0,
        )
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    tl.store(
        dw_ptr + e * sdw_e + ro[:, None] * sdw_o + ri[None, :] * sdw_i,
        acc.to(dw_ptr.dtype.element_ty),
        mask=(ro[:, None] < n_out) & (ri[None, :] < n_in),
    )


def _tiles(counts_E: Tensor, n_rows: int) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    counts = counts_E.to(torch.int64)
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    tiles_cum = torch.cumsum(tiles, 0)
    max_tiles = triton.cdiv(n_rows, BLOCK_M) + counts.numel()
    tile_expert = torch.searchsorted(tiles_cum, torch.arange(max_tiles, device=counts.device), right=True)
    return tile_expert, tiles_cum - tiles, torch.cumsum(counts, 0) - counts, counts, max_tiles


def triton_gmm(x_TK: Tensor, w_E: Tensor, counts_E: Tensor, transpose_w: bool) -> Tensor:
    """`y[rows of e] = x[rows of e] @ B_e` with B_e = w[e].T (w is (E, N, K)) or, if transpose_w,
    B_e = w[e] (w is (E, K, N))."""
    T, K = x_TK.shape
    E = w_E.shape[0]
    if transpose_w:
        N, sw_k, sw_n = w_E.shape[2], w_E.stride(1), w_E.stride(2)
    else:
        N, sw_k, sw_n = w_E.shape[1], w_E.stride(2), w_E.stride(1)
    y = x_TK.new_empty(T, N)
    tile_expert, tile_start, row_start, counts, max_tiles = _tiles(counts_E, T)
    grid = (max_tiles, triton.cdiv(N, BLOCK_N))
    _gmm_kernel[grid](
        x_TK, w_E, y, tile_expert, tile_start, row_start, counts,
        E, N, K,
        x_TK.stride(0), x_TK.stride(1), w_E.stride(0), sw_k, sw_n, y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=x_TK.dtype == torch.float32,
    )
    return y


def triton_gmm_wgrad(dy_TO: Tensor, x_TI: Tensor, counts_E: Tensor) -> Tensor:
    """`dw[e] = dy[rows of e].T @ x[rows of e]`, shape (E, O, I)."""
    E, n_out, n_in = counts_E.numel(), dy_TO.shape[1], x_TI.shape[1]
    dw = dy_TO.new_empty(E, n_out, n_in)
    counts = counts_E.to(torch.int64)
    row_start = torch.cumsum(counts, 0) - counts
    grid = (E, triton.cdiv(n_out, BLOCK_N), triton.cdiv(n_in, BLOCK_K))
    _wgrad_kernel[grid](
        dy_TO, x_TI, dw, row_start, counts,
        n_out, n_in,
        dy_TO.stride(0), dy_TO.stride(1), x_TI.stride(0), x_TI.stride(1), dw.stride(0), dw.stride(1), dw.stride(2),
        BLOCK_O=BLOCK_N, BLOCK_I=BLOCK_K, BLOCK_R=BLOCK_M, IEEE=dy_TO.dtype == torch.float32,
    )
    return dw
