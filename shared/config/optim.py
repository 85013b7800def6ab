"""Optimizer section: Muon for hidden matrices, AdamW for the rest, and the LR schedule."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from shared.config.base import Section


class OptimConfig(Section):
    name: Literal["muon_adamw", "adamw"] = Field(
        "muon_adamw", description="muon_adamw: Muon on hidden matrices (experts included), AdamW elsewhere; adamw: AdamW only."
    )
    lr: float = Field(3e-3, gt=0.0, le=10.0, description="Peak learning rate (at muP base width).")
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="Final LR as a fraction of the peak (cosine/WSD).")
    weight_decay: float = Field(0.1, ge=0.0, le=10.0, description="Decoupled weight decay for matrices.")
    decay_scaling: Literal["independent", "coupled"] = Field(
        "independent",
        description="independent: each step shrinks weights by base_lr·schedule·weight_decay whatever the muP LR "
        "multiplier (so decay keeps its strength across widths); coupled: torch's lr·multiplier·weight_decay.",
    )
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    beta2: float = Field(0.95, ge=0.0, lt=1.0, description="AdamW β2.")
    eps: float = Field(1e-8, gt=0.0, le=1e-2, description="AdamW ε.")
    muon_momentum: float = Field(0.95, ge=0.0, lt=1.0, description="Muon momentum.")
    ns_steps: int = Field(5, ge=1, le=20, description="Newton–Schulz iterations for Muon's orthogonalisation.")
    schedule: Literal["cosine", "wsd", "constant"] = Field("cosine", description="LR schedule after warmup.")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    decay_fraction: float = Field(0.2, gt=0.0, le=1.0, description="WSD: fraction of steps spent in the final decay.")
    grad_clip: float | None = Field(None, gt=0.0, description="Max global grad norm; None = no clipping (the recipe's choice).")
    nesterov: bool = Field(True, description="Nesterov momentum in Muon.")
    muon_lr_adjust: Literal["match_rms_adamw", "original"] = Field(
        "match_rms_adamw",
        description="Muon update scale: 0.2·√max(A,B) so one LR/WD serves Muon and AdamW (Moonlight), or Keller's √max(1,A/B).",
    )
    muon_lr_ratio: float = Field(
        1.0, gt=0.0, le=100.0,
        description="Muon's LR as a multiple of `lr` (which the AdamW side takes), on top of each matrix's muP "
        "multiplier; with `muon_lr_adjust: match_rms_adamw` one LR is meant to serve both, the width sweeps "
        "in docs/hparam.md measure how far it does.",
    )
    ns_dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="Newton–Schulz compute dtype; auto = bf16 on CUDA, fp32 on CPU (no hardware bf16 there)."
    )
    adamw_impl: Literal["auto", "fused", "foreach"] = Field(
        "auto",
        description="AdamW kernels: fused (one kernel per dtype/device group for the whole update), foreach "
        "(a few multi-tensor kernels per step), auto = fused on CUDA and for plain CPU tensors, foreach for "
        "sharded (DTensor) parameters off CUDA.",
    )
    adamw_patterns: list[str] = Field(
        default_factory=lambda: [r"embed", r"(^|\.)lm_head\.", r"norm", r"router", r"bias", r"bungee"],
        description="Regexes (re.search on parameter names) sent to AdamW; other >= 2-D tensors go to Muon.",
    )
    no_decay_patterns: list[str] = Field(
        default_factory=lambda: [r"router"],
        description="Regexes (re.search on parameter names) of matrices kept out of weight decay. The router: "
        "its logits' spread across tokens is what the balancing bias competes with, and decay shrinks it "
        "until the bias alone picks the experts and every token picks the same ones.",
    )
    lr_scales: dict[str, float] = Field(
        default_factory=dict,
        description="Extra LR factors on top of muP, {regex on parameter names: factor} (first match wins), "
        "e.g. {router: 0.1}.",
    )
    log_stats: bool = Field(True, description="Compute per-group grad norm and update RMS at each step (one param copy).")

    @model_validator(mode="after")
    def _check_patterns(self) -> OptimConfig:
        for field, patterns in (("adamw_patterns", self.adamw_patterns), ("no_decay_patterns", self.no_decay_patterns),
                                ("lr_scales", list(self.lr_scales))):
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"optim.{field}: {pattern!r} is not a valid regex ({exc})") from None
        bad = {k: v for k, v in self.lr_scales.items() if not 0 < v <= 100}
        if bad:
            raise ValueError(f"optim.lr_scales: factors must be in (0, 100], got {bad}")
        return self
