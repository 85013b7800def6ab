"""Grouped GEMM: rows of `x` sorted by expert, each block multiplied by its own expert's weight.

`grouped_mm(x_TI, w_EOI, counts_E, backend)` returns `y_TO` with
`y[rows of e] = x[rows of e] @ w[e].T` — weights in `nn.Linear` layout (out, in) per expert, the
layout Muon orthogonalises and `torch._grouped_mm` reads through a transposed view.

Why our own autograd: the backward of every backend is two more grouped GEMMs
(dx = dy @ w per group, dw[e] = dy_e.T @ x_e), and writing it once here gives every backend the
same saved tensors and lets the precision code wrap one differentiable function. Backends:

- `loop`: one `torch.mm` per expert into slices of a preallocated output. Works on any device and
  dtype; on CPU it is also the fastest (torch 2.13's CPU `_grouped_mm` measured ~3× slower than
  per-expert `mm(out=...)` at 4096×8 rows, d 512 → 128, 64 experts). Needs one host sync for the
  counts.
- `grouped_mm`: `torch._grouped_mm` with cumulative offsets; no host sync. Needs 16-byte aligned
  strides (inner sizes a multiple of 16 bytes), checked with a clear error.
- `triton`: the kernels in `shared.kernels.triton_gmm` (runs on CPU under `TRITON_INTERPRET=1`).

`fused` is a backend of the whole routed-expert path (`shared.kernels.fused_experts`), not of a
lone grouped GEMM: a grouped GEMM asked for under it (expert parallelism's received rows, or the
unfused path) runs as `loop`.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

BACKENDS = ("loop", "grouped_mm", "triton")
DISPATCH_BACKENDS = (*BACKENDS, "fused")


def resolve_backend(backend: str, device: torch.device) -> str:
    """The grouped GEMM to run: `auto` picks the fastest measured for the device (`loop` on CPU,
    `grouped_mm` on CUDA); `fused` (a whole-path backend) runs its lone grouped GEMMs as `loop`."""
    if backend == "auto":
        return "grouped_mm" if device.type == "cuda" else "loop"
    if backend == "fused":
        return "loop"
    if backend not in BACKENDS:
        raise ValueError(f"unknown dispatch backend {backend!r}; choose one of {list(DISPATCH_BACKENDS)} or 'auto'")
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "the triton backend needs a CUDA device, or TRITON_INTERPRET=1 in the environment to run on CPU"
        )
    return backend


def _offsets(counts_E: Tensor) -> Tensor:
    return torch.cumsum(counts_E, 0).to(torch.int32)


def _check_aligned(*tensors: Tensor) -> None:
    for t in tensors:
        if (t.shape[-1] * t.element_size()) % 16:
            raise ValueError(
                f"grouped_mm backend needs 16-byte aligned rows; got inner size {t.shape[-1]} of {t.dtype}. "
                "Use widths that are multiples of 4 (fp32) or 8 (bf16), or the loop backend."
            )


# ---- per-backend primitives: forward y = x @ w.T, dx = dy @ w, dw[e] = dy_e.T @ x_e --------------


def _loop_xwT(x_TI: Tensor, w_EOI: Tensor, counts: list[int], transpose: bool) -> Tensor:
    out_dim = w_EOI.shape[2] if transpose else w_EOI.shape[1]
    y = x_TI.new_empty(x_TI.shape[0], out_dim)
    start = 0
    for e, c in enumerate(counts):
        if c:
            w = w_EOI[e] if transpose else w_EOI[e].t()
            torch.mm(x_TI[start : start + c], w, out=y[start : start + c])
        start += c
    if start < x_TI.shape[0]:
        y[start:].zero_()
    return y


def _loop_wgrad(dy_TO: Tensor, x_TI: Tensor, counts: list[int]) -> Tensor:
    E = len(counts)
    dw = dy_TO.new_empty(E, dy_TO.shape[1], x_TI.shape[1])
    start = 0
    for e, c in enumerate(counts):
        if c:
            torch.mm(dy_TO[start : start + c].t(), x_TI[start : start + c], out=dw[e])
        else:
            dw[e].zero_()
        start += c
    return dw


def _gmm_xwT(x_TI: Tensor, w_EOI: Tensor, offs: Tensor, transpose: bool) -> Tensor:
    w = w_EOI if transpose else w_EOI.transpose(-2, -1)
    _check_aligned(x_TI, w_EOI)
    return torch._grouped_mm(x_TI.contiguous(), w, offs=offs)


def _gmm_wgrad(dy_TO: Tensor, x_TI: Tensor, offs: Tensor, counts_E: Tensor) -> Tensor:
    """dw[e] = dy_eᵀ x_e. `torch._grouped_mm` allocates its output uninitialised and need not write
    the block of a group with no rows, so an expert that got no tokens would take whatever the
    caching allocator's recycled block held (NaNs included) as its gradient: zeroed here, without a
    host sync."""
    _check_aligned(dy_TO, x_TI)
    dw = torch._grouped_mm(dy_TO.t(), x_TI.contiguous(), offs=offs)
    return dw.masked_fill_((counts_E == 0)[:, None, None], 0)


class _GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_TI: Tensor, w_EOI: Tensor, counts_E: Tensor, backend: str) -> Tensor:
        ctx.backend = backend
        ctx.save_for_backward(x_TI, w_EOI, counts_E)
        if backend == "loop":
            counts = counts_E.tolist()
            ctx.counts = counts
            return _loop_xwT(x_TI, w_EOI, counts, transpose=False)
        if backend == "grouped_mm":
            return _gmm_xwT(x_TI, w_EOI, _offsets(counts_E), transpose=False)
        from shared.kernels.triton_gmm import triton_gmm

        return triton_gmm(x_TI, w_EOI, counts_E, transpose_w=False)

    @staticmethod
    def backward(ctx, dy_TO: Tensor):
        x_TI, w_EOI, counts_E = ctx.saved_tensors
        dy_TO = dy_TO.contiguous()
        dx = dw = None
        if ctx.backend == "loop":
            if ctx.needs_input_grad[0]:
                dx = _loop_xwT(dy_TO, w_EOI, ctx.counts, transpose=True)
            if ctx.needs_input_grad[1]:
                dw = _loop_wgrad(dy_TO, x_TI, ctx.counts)
        elif ctx.backend == "grouped_mm":
            offs = _offsets(counts_E)
            if ctx.needs_input_grad[0]:
                dx = _gmm_xwT(dy_TO, w_EOI, offs, transpose=True)
            if ctx.needs_input_grad[1]:
                dw = _gmm_wgrad(dy_TO, x_TI, offs, counts_E)
        else:
            from shared.kernels.triton_gmm import triton_gmm, triton_gmm_wgrad

            if ctx.needs_input_grad[0]:
                dx = triton_gmm(dy_TO, w_EOI, counts_E, transpose_w=True)
            if ctx.needs_input_grad[1]:
                dw = triton_gmm_wgrad(dy_TO, x_TI.contiguous(), counts_E)
        return dx, dw, None, None


def grouped_mm(x_TI: Tensor, w_EOI: Tensor, counts_E: Tensor, backend: str = "auto") -> Tensor:
    """Differentiable grouped GEMM: `y[rows of e] = x[rows of e] @ w_EOI[e].T`.

    x_TI: (T, I) rows sorted by expert, expert e owning `counts_E[e]` consecutive rows, with
    `counts_E.sum() == T`; w_EOI: (E, O, I); counts_E: (E,) integer. Returns (T, O).
    """
    if x_TI.dim() != 2 or w_EOI.dim() != 3 or x_TI.shape[1] != w_EOI.shape[2]:
        raise ValueError(f"grouped_mm expects x (T, I) and w (E, O, I); got {tuple(x_TI.shape)} and {tuple(w_EOI.shape)}")
    if counts_E.shape != (w_EOI.shape[0],):
        raise ValueError(f"counts_E must have shape ({w_EOI.shape[0]},), got {tuple(counts_E.shape)}")
    device_type = x_TI.device.type
    if torch.is_autocast_enabled(device_type):
        # Autocast has no rule for `_grouped_mm` (nor for this custom function): without this the
        # experts of a bf16-autocast run would multiply fp32 weights by fp32 activations — or fail
        # on a bf16 input — while every other GEMM runs in bf16. Cast as autocast casts `mm`.
        dtype = torch.get_autocast_dtype(device_type)
        x_TI, w_EOI = x_TI.to(dtype), w_EOI.to(dtype)
    backend = resolve_backend(backend, x_TI.device)
    return _GroupedMM.apply(x_TI, w_EOI, counts_E, backend)
