"""fp32 CPU GEMMs through oneDNN, where torch's own `mm` runs at half the machine's speed.

torch's CPU `mm` calls MKL. MKL picks its code path by CPU vendor, and on AMD processors it takes
the AVX2 kernels even when the core has AVX-512: on our Zen 5 development machine `mm` reaches
≈ 107 GFLOP/s per core at the MoE shapes, while oneDNN (also linked into torch, dispatching on
the instruction set alone) reaches ≈ 245 GFLOP/s on the same products, in fp32 with fp32
accumulation (benchmarks/cpu_gemm.py; docs/moe.md). torch reaches oneDNN's matmul through
`torch.ops.mkldnn._linear_pointwise`, the op its own compiler emits for CPU linears; it takes
ordinary strided tensors, transposed views included.

`mm_nt(a, b)` = a @ b.T with the library chosen by `cpu_gemm_library()`: `onednn` for fp32 CPU
tensors when torch has it and the product is not tiny, else `torch.mm`. `MOELAB_CPU_GEMM=mkl` (or `use_cpu_gemm("mkl")`)
forces torch's `mm`, to compare or to rule the library out when debugging. `Linear` is an
`nn.Linear` whose forward and backward GEMMs go through `mm_nt`: the model's dense FFNs, shared
experts and bias-free attention projections use it, and the LM head calls `linear`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LIBRARIES = ("auto", "onednn", "mkl")
_choice = os.environ.get("MOELAB_CPU_GEMM", "auto")


@functools.cache
def onednn_available() -> bool:
    """Whether this torch build has oneDNN and the matmul op we call into it."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def cpu_gemm_library() -> str:
    """The library `mm_nt` uses for fp32 CPU tensors: `onednn` or `mkl` (torch's `mm`)."""
    if _choice not in LIBRARIES:
        raise ValueError(f"MOELAB_CPU_GEMM={_choice!r}; choose one of {list(LIBRARIES)}")
    if _choice == "auto":
        return "onednn" if onednn_available() else "mkl"
    if _choice == "onednn" and not onednn_available():
        raise RuntimeError("MOELAB_CPU_GEMM=onednn, but this torch build has no oneDNN matmul")
    return _choice


@contextlib.contextmanager
def use_cpu_gemm(library: str) -> Iterator[None]:
    """Run the enclosed code with `library` (`auto`, `onednn` or `mkl`) as the CPU GEMM."""
    global _choice
    if library not in LIBRARIES:
        raise ValueError(f"unknown CPU GEMM library {library!r}; choose one of {list(LIBRARIES)}")
    previous, _choice = _choice, library
    try:
        yield
    finally:
        _choice = previous


# Below this many multiply-adds oneDNN's per-call cost (≈ 30 µs) outweighs its faster kernel:
# 256×64×64 ran at 0.75× torch's `mm`, 1024×64×64 at 0.9–1.3×, 4096×512×128 at 1.9–2.1×.
ONEDNN_MIN_MACS = 1 << 21


def _uses_onednn(a: Tensor, b: Tensor, macs: int) -> bool:
    """Under `torch.compile` the plain ops are traced instead: inductor picks its own CPU GEMMs, and
    its lowering of `_linear_pointwise` expects weights it packed itself."""
    return (a.device.type == "cpu" and a.dtype == torch.float32 and b.dtype == torch.float32
            and macs >= ONEDNN_MIN_MACS and not torch.compiler.is_compiling() and cpu_gemm_library() == "onednn")


def mm_nt(a: Tensor, b: Tensor) -> Tensor:
    """a @ b.T for 2-D a (m, k) and b (n, k), any strides; a new (m, n) tensor."""
    if _uses_onednn(a, b, a.shape[0] * a.shape[1] * b.shape[0]):
        return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
    return torch.mm(a, b.t())


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        return mm_nt(x, w)

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, w = ctx.saved_tensors
        dx = mm_nt(dy, w.t()) if ctx.needs_input_grad[0] else None
        dw = mm_nt(dy.t(), x.t()) if ctx.needs_input_grad[1] else None
        return dx, dw


def linear(x: Tensor, w: Tensor) -> Tensor:
    """`F.linear(x, w)` without bias, its three GEMMs through `mm_nt` on CPU fp32 (else `F.linear`)."""
    if not _uses_onednn(x, w, x.numel() * w.shape[0]):
        return F.linear(x, w)
    y = _LinearFunction.apply(x.reshape(-1, x.shape[-1]), w)
    return y.view(*x.shape[:-1], w.shape[0])


class Linear(nn.Linear):
    """A bias-free `nn.Linear` whose GEMMs go through `linear` (oneDNN on CPU fp32).

    Still an `nn.Linear`, so precision code swaps it for its own low-precision linear as before.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight)
