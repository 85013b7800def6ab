"""Muon for 2-D hidden matrices and 3-D expert tensors, with a batched Newton–Schulz step.

Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/): keep a momentum buffer,
replace each matrix's update by its nearest semi-orthogonal matrix (five quintic Newton–Schulz
iterations with coefficients (3.4445, −4.7750, 2.0315)), apply decoupled weight decay.

Why not `torch.optim.Muon` directly: in torch 2.13 it rejects any parameter that is not 2-D, so
the (experts, out, in) tensors of a fine-grained MoE cannot be given to it, and its Newton–Schulz
runs in bf16, which is ~16× slower than fp32 on CPUs without bf16 units (docs/precision.md). What
we keep identical: the update rule, Nesterov momentum as `grad.lerp(buf, momentum)`, the NS
coefficients, and its two LR adjustments. What we add:

- **batched experts**: a 3-D tensor is E independent matrices; the Newton–Schulz iteration runs on
  the whole (E, A, B) batch with `bmm`, normalising each expert's matrix by its own norm, so every
  expert's update is orthogonal on its own (not the concatenation).
- **RMS-matched update scale** (Moonlight, Liu et al. 2025, arXiv 2502.16982): the orthogonal
  update is scaled by 0.2·√max(A, B) so its RMS matches AdamW's (~0.2), and one LR and weight
  decay serve both optimizers (`adjust_lr="match_rms_adamw"`, the default here).
- **compute dtype by device**: fp32 on CPU, bf16 on CUDA (`ns_dtype`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.optim import Optimizer

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(g: Tensor, steps: int = 5, eps: float = 1e-7, dtype: torch.dtype | None = None) -> Tensor:
    """Approximately orthogonalise each matrix of g (..., A, B): ≈ U Vᵀ of its SVD, batched.

    Each matrix is first divided by its Frobenius norm (so its spectral norm is ≤ 1), then the
    quintic iteration X ← aX + (bXXᵀ + c(XXᵀ)²)X runs on the wide orientation (A ≤ B).
    """
    a, b, c = NS_COEFFICIENTS
    x = g.to(dtype or torch.float32)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-2, -1)
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp_min(eps)
    for _ in range(steps):
        gram = x @ x.transpose(-2, -1)
        x = a * x + (b * gram + c * gram @ gram) @ x
    if tall:
        x = x.transpose(-2, -1)
    return x.to(g.dtype)


def _orthogonalize(update: Tensor, steps: int, dtype: torch.dtype) -> Tensor:
    """Newton–Schulz of the whole matrix, also when FSDP2 shards it (a DTensor): orthogonalising
    each shard alone would be wrong, so gather it, orthogonalise, and keep this rank's shard.
    Every rank computes the same whole result, so each cuts its shard locally
    (`src_data_rank=None`) instead of receiving it from rank 0: one collective per matrix, not two."""
    if isinstance(update, DTensor):
        full = newton_schulz(update.full_tensor(), steps, dtype=dtype)
        return distribute_tensor(full, update.device_mesh, update.placements, src_data_rank=None)
    return newton_schulz(update, steps, dtype=dtype)


def update_scale(shape: torch.Size, adjust_lr: str) -> float:
    """LR factor for an (A, B) matrix: Moonlight's 0.2·√max(A,B) or Keller's √max(1, A/B)."""
    rows, cols = shape[-2], shape[-1]
    if adjust_lr == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    if adjust_lr == "original":
        return math.sqrt(max(1.0, rows / cols))
    raise ValueError(f"unknown Muon LR adjustment {adjust_lr!r}; use match_rms_adamw or original")


class Muon(Optimizer):
    """Muon over 2-D matrices and 3-D stacks of matrices (one orthogonalisation per leading index)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        adjust_lr: str = "match_rms_adamw",
        ns_dtype: str = "auto",
    ) -> None:
        if lr < 0 or weight_decay < 0 or not 0 <= momentum < 1:
            raise ValueError(f"Muon: need lr >= 0, weight_decay >= 0, 0 <= momentum < 1 (got {lr}, {weight_decay}, {momentum})")
        defaults = dict(
            lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
            adjust_lr=adjust_lr, ns_dtype=ns_dtype,
        )  # fmt: skip
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() not in (2, 3):
                    raise ValueError(
                        f"Muon takes 2-D matrices or 3-D expert stacks; got shape {tuple(p.shape)}. "
                        "Send vectors and scalars to AdamW (optim.adamw_patterns)."
                    )

    @staticmethod
    def _ns_dtype(choice: str, device: torch.device) -> torch.dtype:
        if choice == "auto":
            return torch.bfloat16 if device.type == "cuda" else torch.float32
        return torch.bfloat16 if choice == "bf16" else torch.float32

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, mom = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mom)
                update = p.grad.lerp(buf, mom) if group["nesterov"] else buf
                ortho = _orthogonalize(update, group["ns_steps"], self._ns_dtype(group["ns_dtype"], p.device))
                p.mul_(1 - lr * wd)
                p.add_(ortho.to(p.dtype), alpha=-lr * update_scale(p.shape, group["adjust_lr"]))
        return loss
