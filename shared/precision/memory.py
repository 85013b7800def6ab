"""Bytes per parameter in HBM for each precision mode: the true cost of mixed precision.

Per parameter we count four things (activations are per token, not per parameter, and excluded):

- weights: the master copy, fp32 (4 B) or bf16 (2 B, updated with stochastic rounding);
- grads: accumulated in the master dtype (fp32 4 B as Megatron's main_grad, or bf16 2 B);
- optimizer state, in the master dtype: AdamW keeps two moments (8 B / 4 B), Muon one momentum
  buffer (4 B / 2 B) — which optimizer a tensor gets follows `shared.optim`'s rules;
- low-precision copies that live through forward and backward: a bf16 copy (2 B) when the
  master is fp32 and the GEMM runs in bf16 (none when the master already is bf16); fp8 and nvfp4
  GEMMs keep two quantised layouts (row-wise for the forward, column-wise for Dgrad, as
  transformer-engine does), each element plus its share of the scales: fp8 1 B + 4/16384 B
  (128×128 fp32 scales), + 1/32 B (mxfp8 e8m0 per 32), + 4/K B (row); nvfp4 0.5 B + 1/16 B
  (e4m3 per 16).

The point it makes: with fp32 master weights fp8 experts cost as much HBM per parameter as bf16
ones (the 2 B bf16 copy becomes two 1 B fp8 copies); the savings are in activations and GEMM time,
and parameter memory only shrinks with bf16 master weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from shared.config.model import ModelConfig
from shared.config.optim import OptimConfig
from shared.optim.groups import assign_optimizer


@dataclass(frozen=True)
class BytesPerParam:
    weights: float
    grads: float
    optimizer: float
    lowp_copies: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.lowp_copies


def lowp_copy_bytes(mode: str, master: str, granularity: str = "block", reduction_dim: int = 4096) -> float:
    """Bytes per parameter of the quantised weight copies a GEMM in `mode` keeps."""
    if mode == "bf16":
        return 2.0 if master == "fp32" else 0.0
    if mode == "fp8":
        scale = {"tensor": 0.0, "row": 4.0 / reduction_dim, "block": 4.0 / (128 * 128), "mxfp8": 1.0 / 32}[granularity]
        return 2 * (1.0 + scale)
    if mode == "nvfp4":
        return 2 * (0.5 + 1.0 / 16)
    raise ValueError(f"unknown precision mode {mode!r}; use bf16, fp8 or nvfp4")


def bytes_per_param(mode: str, master: str, optimizer: str, granularity: str = "block") -> BytesPerParam:
    """Bytes one parameter costs with GEMMs in `mode`, `master` weights and `optimizer` (muon|adamw)."""
    w = 4.0 if master == "fp32" else 2.0
    states = {"adamw": 2, "muon": 1}[optimizer]
    return BytesPerParam(weights=w, grads=w, optimizer=states * w, lowp_copies=lowp_copy_bytes(mode, master, granularity))


def param_classes(cfg: ModelConfig, optim: OptimConfig) -> dict[tuple[str, str], int]:
    """{(class, optimizer): parameter count}; class is expert | dense | other (embeddings, head, norms, router)."""
    from shared.model.transformer import MoETransformer

    with torch.device("meta"):
        model = MoETransformer(cfg)
    expert_ids = set()
    for module in model.modules():
        if hasattr(module, "gmm"):  # routed experts (their grouped-GEMM seam)
            expert_ids |= {id(p) for p in module.parameters()}
        shared = getattr(module, "shared", None)
        if hasattr(module, "router") and isinstance(shared, nn.Module):
            expert_ids |= {id(p) for p in shared.parameters()}
    head = {id(model.lm_head.weight)} if model.lm_head is not None else set()
    linear_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - head
    out: dict[tuple[str, str], int] = {}
    for name, p in model.named_parameters():
        cls = "expert" if id(p) in expert_ids else "dense" if id(p) in linear_ids else "other"
        key = (cls, assign_optimizer(name, p.dim(), optim))
        out[key] = out.get(key, 0) + p.numel()
    return out


def model_bytes(
    classes: dict[tuple[str, str], int], expert_mode: str, dense_mode: str, master: str, granularity: str
) -> dict:
    """Whole-model HBM for parameters (weights, grads, optimizer, copies) in bytes, by component;
    `classes` comes from `param_classes`. Embeddings, head, norms and router count as bf16 GEMMs."""
    totals = {"weights": 0.0, "grads": 0.0, "optimizer": 0.0, "lowp_copies": 0.0}
    n = 0
    for (cls, opt), count in classes.items():
        mode = expert_mode if cls == "expert" else dense_mode if cls == "dense" else "bf16"
        b = bytes_per_param(mode, master, opt, granularity)
        for k in totals:
            totals[k] += getattr(b, k) * count
        n += count
    totals["total"] = sum(totals.values())
    totals["params"] = n
    return totals
