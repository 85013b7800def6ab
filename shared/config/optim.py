"""Optimizer section: Muon for hidden matrices, AdamW for the rest, and the LR schedule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config.base import Section


class OptimConfig(Section):
    name: Literal["muon_adamw", "adamw"] = Field(
        "muon_adamw", description="muon_adamw: Muon on hidden matrices (experts included), AdamW elsewhere; adamw: AdamW only."
    )
    lr: float = Field(3e-3, gt=0.0, le=10.0, description="Peak learning rate (at muP base width).")
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="Final LR as a fraction of the peak (cosine/WSD).")
    weight_decay: float = Field(0.1, ge=0.0, le=10.0, description="Decoupled weight decay for matrices.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    beta2: float = Field(0.95, ge=0.0, lt=1.0, description="AdamW β2.")
    eps: float = Field(1e-8, gt=0.0, le=1e-2, description="AdamW ε.")
    muon_momentum: float = Field(0.95, ge=0.0, lt=1.0, description="Muon momentum.")
    ns_steps: int = Field(5, ge=1, le=20, description="Newton–Schulz iterations for Muon's orthogonalisation.")
    schedule: Literal["cosine", "wsd", "constant"] = Field("cosine", description="LR schedule after warmup.")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    decay_fraction: float = Field(0.2, gt=0.0, le=1.0, description="WSD: fraction of steps spent in the final decay.")
    grad_clip: float | None = Field(None, gt=0.0, description="Max global grad norm; None = no clipping (the recipe's choice).")
