"""Per-optimizer muP LR multipliers: Adam's 1/fan-in rule is wrong for Muon's orthogonalised update.

Both rules come from one requirement, the spectral condition for feature learning (Yang, Simon &
Bernstein 2023, arXiv:2310.17813): a hidden matrix W (fan_out A, fan_in B) should take updates
with spectral norm ‖ΔW‖ ∝ √(A/B), so that ΔW·x has coordinates of a width-independent size.

- **Adam** (and AdamW): an update of per-entry size η is nearly low-rank, ‖ΔW‖ ≈ η·√(A·B), so
  η ∝ 1/B — muP's LR × B₀/B (TP5 Table 3). That is `ParamScaling.adam_lr_multiplier`.
- **Muon**: the update is η·s·O with O semi-orthogonal (every singular value ≈ 1), so ‖ΔW‖ = η·s.
  With Moonlight's RMS matching s = 0.2·√max(A, B), the condition asks
  η ∝ √(A/B) / √max(A, B): for a square n×n hidden matrix η ∝ 1/√n, not 1/n. Adam's rule would
  shrink Muon's effective step as width^-½ (≈ 6× too small at 40× the base width). With Keller
  Jordan's original s = √max(1, A/B), η ∝ √(A/B)/√max(1, A/B): width-independent for A ≥ B.

Multipliers are relative to the base model's shapes (1 there), so the tuned base LR carries over.
Parameters that are not matrices (vectors, conv kernels, embeddings, the head) take 1.
"""

from __future__ import annotations

import math

from shared.model.mup import ParamScaling


def _muon_step_per_lr(fan_out: int, fan_in: int, adjust_lr: str) -> float:
    """Spectral norm of Muon's update per unit LR divided by the target √(A/B), up to a constant."""
    if adjust_lr == "match_rms_adamw":
        scale = 0.2 * math.sqrt(max(fan_out, fan_in))
    elif adjust_lr == "original":
        scale = math.sqrt(max(1.0, fan_out / fan_in))
    else:
        raise ValueError(f"unknown Muon LR adjustment {adjust_lr!r}; use match_rms_adamw or original")
    return scale / math.sqrt(fan_out / fan_in)


def muon_lr_multiplier(s: ParamScaling, adjust_lr: str) -> float:
    """LR multiplier for a matrix updated by Muon: keeps ‖ΔW‖ ∝ √(A/B) relative to the base shapes."""
    if s.role != "matrix":
        return 1.0
    return _muon_step_per_lr(s.base_fan_out, s.base_fan_in, adjust_lr) / _muon_step_per_lr(s.fan_out, s.fan_in, adjust_lr)


def lr_multiplier(s: ParamScaling, optimizer: str, adjust_lr: str = "match_rms_adamw") -> float:
    """The muP LR multiplier of one parameter under `optimizer` ('muon' or 'adamw')."""
    return muon_lr_multiplier(s, adjust_lr) if optimizer == "muon" else s.adam_lr_multiplier
