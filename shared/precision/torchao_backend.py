"""`precision.backend: torchao`: the experts' fp8 GEMMs on torchao's MoE training path, the named peer.

Why a backend and not only a baseline: torchao (a few-MB wheel, carried to a GPU image as
`.gpu-wheels`) ships a differentiable fp8 row-wise grouped GEMM for MoE training,
`torchao.prototype.moe_training._to_fp8_rowwise_then_scaled_grouped_mm` (checked against torchao
0.18.0): Triton kernels quantise A per row and B per (expert, column), the Wgrad operands per
token group, and `torch._scaled_grouped_mm` multiplies them. Running it behind the same seam as
ours lets one training run swap it in, and lets the GPU script time ours against it on the same
shapes. Its recipe is our `fp8_granularity: row` with e4m3 gradients, except that torchao rounds
its scales to powers of two (so its values differ from the emulation's in the last fp8 bit);
it re-quantises the weights on every call (no cache). Any other recipe is refused at config
load; a machine without torchao or a CUDA sm90 GPU is refused when the model is built, saying which.

Layout: the function takes A (rows, K) row-major, B_t (E, K, N) column-major (our (E, N, K)
weight transposed, a view) and int32 group end offsets whose groups are multiples of 16 rows
(with `pad_token_groups_for_grouped_mm=False`, the only setting 0.18.0 accepts), so rows are
placed in the same 16-aligned layout as our ragged path (`ragged.aligned_layout`). torchao leaves
an empty expert's weight-gradient block unwritten; `_ZeroEmptyGroups` zeroes it.
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

from shared.config.precision import PrecisionConfig
from shared.precision.ragged import aligned_layout

ENTRY = "torchao.prototype.moe_training"


def _installed() -> bool:
    return importlib.util.find_spec("torchao") is not None


def torchao_missing() -> str | None:
    """Why torchao's MoE fp8 GEMM cannot be imported here (None when it can)."""
    if not _installed():
        return "torchao is not installed (pip install torchao; a few-MB wheel for torch >= 2.11; carry it in .gpu-wheels)"
    try:
        module = importlib.import_module(ENTRY)
    except Exception as exc:  # noqa: BLE001 - any import failure of the optional package is the reason
        return f"torchao is installed but {ENTRY} does not import: {str(exc).splitlines()[0][:200]}"
    if not hasattr(module, "_to_fp8_rowwise_then_scaled_grouped_mm"):
        return f"this torchao has no {ENTRY}._to_fp8_rowwise_then_scaled_grouped_mm (checked against 0.18.0)"
    return None


def torchao_status(cfg: PrecisionConfig, mode: str) -> str | None:
    """Why `mode` under `cfg` cannot run on torchao on this machine (None when it can)."""
    reason = cfg.torchao_unsupported_reason(mode) or torchao_missing()
    if reason:
        return reason
    if not torch.cuda.is_available():
        return "no CUDA device is visible (torchao's fp8 grouped GEMM needs an sm90 GPU)"
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return f"{torch.cuda.get_device_name()} (sm{major}{minor}) cannot run torch._scaled_grouped_mm in fp8 (sm90+)"
    return None


class _ZeroEmptyGroups(torch.autograd.Function):
    """Identity on w (E, N, K) whose backward zeroes the gradient of experts that got no rows."""

    @staticmethod
    def forward(ctx, w, empty):
        ctx.save_for_backward(empty)
        return w.view_as(w)

    @staticmethod
    def backward(ctx, dw):
        (empty,) = ctx.saved_tensors
        return dw.masked_fill(empty[:, None, None], 0), None


def torchao_grouped_linear(x: torch.Tensor, w: torch.Tensor, counts: torch.Tensor | list[int]) -> torch.Tensor:
    """Grouped GEMM in `nn.Linear` layout (rows of x sorted by expert, w (E, N, K)) on torchao's fp8 path."""
    from torchao.prototype.moe_training import _to_fp8_rowwise_then_scaled_grouped_mm

    counts_t = (counts if torch.is_tensor(counts) else torch.tensor(counts)).to(x.device)
    layout = aligned_layout(counts_t, x.shape[0])
    w = _ZeroEmptyGroups.apply(w, layout.empty)
    y = _to_fp8_rowwise_then_scaled_grouped_mm(
        layout.scatter(x), w.transpose(-2, -1), layout.offs, out_dtype=torch.bfloat16,
        pad_token_groups_for_grouped_mm=False,
    )
    return layout.gather(y).to(x.dtype)


def torchao_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ w (N, K)ᵀ as a one-group torchao grouped GEMM (shared experts, dense layers)."""
    x2 = x.reshape(-1, x.shape[-1])
    y = torchao_grouped_linear(x2, w[None], torch.tensor([x2.shape[0]], device=x.device))
    return y.reshape(*x.shape[:-1], w.shape[0])
