"""fp32 CPU GEMMs on whichever of torch's two libraries is faster here: MKL or oneDNN.

torch's CPU `mm` and `F.linear` call MKL; oneDNN's matmul, also linked into torch, is reached
through `torch.ops.mkldnn._linear_pointwise` (the op torch's own compiler emits for CPU linears;
it takes ordinary strided tensors, transposed views included). Which is faster depends on the
machine and the product's shape: MKL picks its kernels by CPU vendor (its AVX2 code on AMD
processors, AVX-512 ones included), oneDNN by instruction set alone, so either library can win by
a wide margin (the measurements: docs/moe.md, "fp32 GEMMs"). `shared.kernels.gemm_autotune`
measures it per machine and shape class and caches the result.

`mm_nt(a, b)` = a @ b.T for 2-D fp32 CPU tensors, on the library `MOELAB_CPU_GEMM` selects:
`auto` (the default: the measured choice for the product's class), `mkl` (always torch's `mm`,
which is what plain PyTorch runs) or `onednn` (always oneDNN, to compare). Products under
`ONEDNN_MIN_MACS` multiply-adds, other dtypes and devices, and anything traced by `torch.compile`
(inductor picks its own CPU GEMMs, and its lowering of `_linear_pointwise` expects weights it
packed itself) run torch's `mm` unmeasured. `Linear` is an `nn.Linear` whose three GEMMs go through
the same choice, and becomes plain `F.linear` when all three are MKL; the LM head calls `linear`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from shared.kernels import gemm_autotune
from shared.kernels.gemm_autotune import layout_of

SETTINGS = ("auto", "onednn", "mkl")
_setting = os.environ.get("MOELAB_CPU_GEMM", "auto")

# Products below this many multiply-adds run torch's `mm` without a lookup. They take ≈ 20 µs on
# 2 AVX-512 cores, so the class lookup (≈ 1 µs) would cost up to 5%, and oneDNN's per-call cost
# (≈ 10–30 µs) outweighs its kernel: 256×64×64 ran at 0.72–0.77× of torch's `mm` on oneDNN and
# 1024×64×64 at 0.9–1.3×, on the machine where oneDNN is 2× faster on large products.
ONEDNN_MIN_MACS = 1 << 22


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build has oneDNN and the matmul op we call into it."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def cpu_gemm_setting() -> str:
    """`auto`, `onednn` or `mkl`: the library policy of `mm_nt` (checked; `onednn` needs oneDNN)."""
    if _setting not in SETTINGS:
        raise ValueError(f"MOELAB_CPU_GEMM={_setting!r}; choose one of {list(SETTINGS)}")
    if _setting == "onednn" and not onednn_available():
        raise RuntimeError("MOELAB_CPU_GEMM=onednn, but this torch build has no oneDNN matmul")
    return _setting


@contextlib.contextmanager
def use_cpu_gemm(setting: str) -> Iterator[None]:
    """Run the enclosed code with `setting` (`auto`, `onednn` or `mkl`) as the CPU GEMM policy."""
    global _setting
    if setting not in SETTINGS:
        raise ValueError(f"unknown CPU GEMM setting {setting!r}; choose one of {list(SETTINGS)}")
    previous, _setting = _setting, setting
    try:
        yield
    finally:
        _setting = previous


def library_for(m: int, k: int, n: int, layout: str, vary: str = "") -> str:
    """`mkl` or `onednn` for an fp32 CPU product a·bᵀ (a m×k, b n×k) with operand layouts `layout`.

    `vary` says which size changes from call to call at this call site (`m` rows, `k` the
    reduction): the autotune then times oneDNN with a new primitive per call, as it will run.
    """
    if m * k * n < ONEDNN_MIN_MACS or _setting == "mkl" or torch.compiler.is_compiling():
        return "mkl"
    if _setting != "auto":
        return cpu_gemm_setting()  # `onednn`, once checked
    return _TUNER.library(m, k, n, layout, vary) if onednn_available() else "mkl"


_TUNER = gemm_autotune.TUNER
_F32 = torch.float32


def library_of(a: Tensor, b: Tensor, vary: str = "") -> str:
    """`library_for` the product a·bᵀ of these tensors (`mkl` unless both are fp32 on CPU). It sits
    in front of every GEMM, so it is kept to a few attribute reads (≈ 1 µs)."""
    if a.dtype is not _F32 or b.dtype is not _F32 or not a.is_cpu:
        return "mkl"
    m, k = a.shape
    sa, sb = a.stride(), b.stride()
    layout = ("r" if sa[1] == 1 else "c" if sa[0] == 1 else "s") + ("r" if sb[1] == 1 else "c" if sb[0] == 1 else "s")
    return library_for(m, k, b.shape[0], layout, vary)


def mm_nt(a: Tensor, b: Tensor, vary: str = "", out: Tensor | None = None) -> Tensor:
    """a @ b.T for 2-D a (m, k) and b (n, k), any strides; into `out` (m, n) if given."""
    if library_of(a, b, vary) == "onednn":
        y = torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
        return y if out is None else out.copy_(y)
    return torch.mm(a, b.t()) if out is None else torch.mm(a, b.t(), out=out)


def addmm_nt_(c: Tensor, a: Tensor, b: Tensor, vary: str = "") -> Tensor:
    """c += a @ b.T in place: on MKL one GEMM accumulating into c (no separate addition pass)."""
    if library_of(a, b, vary) == "onednn":
        return c.add_(torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], ""))
    return c.addmm_(a, b.t())


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, libraries: tuple[str, str, str]) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.libraries = libraries
        return _GEMM[libraries[0]](x, w)

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, w = ctx.saved_tensors
        _, dgrad, wgrad = ctx.libraries
        dy = dy.contiguous()  # the layout the choices were made for
        dx = _GEMM[dgrad](dy, w.t()) if ctx.needs_input_grad[0] else None
        dw = _GEMM[wgrad](dy.t(), x.t()) if ctx.needs_input_grad[1] else None
        return dx, dw, None


_GEMM = gemm_autotune.GEMMS


def linear_libraries(rows: int, w: Tensor) -> tuple[str, str, str]:
    """The library of each GEMM of a bias-free linear on `rows` contiguous rows: forward x·wᵀ,
    input gradient dy·w, weight gradient dyᵀ·x."""
    n, k = w.shape
    w_layout = layout_of(w)
    wt_layout = {"r": "c", "c": "r"}.get(w_layout, "s")
    return (library_for(rows, k, n, "r" + w_layout), library_for(rows, n, k, "r" + wt_layout),
            library_for(n, rows, k, "cc"))


def linear(x: Tensor, w: Tensor) -> Tensor:
    """`F.linear(x, w)` without bias, each of its three GEMMs on the library chosen for it; plain
    `F.linear` (torch's own autograd) when all three are MKL or the tensors are not CPU fp32."""
    if x.dtype is not _F32 or w.dtype is not _F32 or not x.is_cpu:
        return F.linear(x, w)
    x2 = x.reshape(-1, x.shape[-1])
    libraries = linear_libraries(x2.shape[0], w)
    if libraries == ("mkl", "mkl", "mkl") or layout_of(x2) != "r":
        return F.linear(x, w)
    return _LinearFunction.apply(x2, w, libraries).view(*x.shape[:-1], w.shape[0])


class Linear(nn.Linear):
    """A bias-free `nn.Linear` whose GEMMs go through `linear` (each on its measured library).

    Still an `nn.Linear`, so precision code swaps it for its own low-precision linear as before.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight)
