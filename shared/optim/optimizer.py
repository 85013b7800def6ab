"""`build_optimizer`: Muon + AdamW from config rules, muP multipliers, schedule, stats, checkpoints.

One object drives both optimizers so the trainer sees a single `step()`: it sets every group's
LR to peak · schedule(step) · muP multiplier, optionally clips the global gradient norm (off by
default: the Kaiju-style recipe trains without clipping), steps Muon and AdamW, optionally rounds
the weights stochastically to bf16 (bf16 master weights, `model.moe.precision.master_weights`),
and returns per-group gradient norm and update RMS for logging. `state_dict()` carries both
optimizers' state and the step counter, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from shared.config.optim import OptimConfig
from shared.optim.groups import GroupSpec, build_groups
from shared.optim.muon import Muon
from shared.optim.schedule import lr_factor
from shared.precision.formats import BF16, round_to_format


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor, gathered when FSDP2 shards it (a DTensor), for norms and update RMS.
    Expert-parallel shards are plain tensors: their statistics are this rank's experts."""
    return t.full_tensor() if isinstance(t, DTensor) else t


class MultiOptimizer:
    """Muon and AdamW over disjoint parameter groups, stepped together."""

    def __init__(
        self,
        groups: list[GroupSpec],
        cfg: OptimConfig,
        total_steps: int,
        master_weights: str = "fp32",
    ) -> None:
        if master_weights not in ("fp32", "bf16"):
            raise ValueError(f"master_weights must be fp32 or bf16, got {master_weights!r}")
        self.cfg, self.total_steps, self.master_weights = cfg, total_steps, master_weights
        self.groups = groups
        self.step_count = 0
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        muon = [self._torch_group(g) for g in groups if g.optimizer == "muon"]
        adamw = [self._torch_group(g) for g in groups if g.optimizer == "adamw"]
        if muon:
            self.optimizers["muon"] = Muon(
                muon, lr=cfg.lr, weight_decay=cfg.weight_decay, momentum=cfg.muon_momentum, nesterov=cfg.nesterov,
                ns_steps=cfg.ns_steps, adjust_lr=cfg.muon_lr_adjust, ns_dtype=cfg.ns_dtype,
            )  # fmt: skip
        if adamw:
            self.optimizers["adamw"] = torch.optim.AdamW(
                adamw, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay
            )
        self._set_lr()

    def _torch_group(self, g: GroupSpec) -> dict:
        wd = self.cfg.weight_decay if g.decay else 0.0
        return {"params": g.params, "lr_mult": g.lr_mult, "weight_decay": wd, "label": g.label, "names": g.names}

    @property
    def param_groups(self) -> list[dict]:
        return [pg for opt in self.optimizers.values() for pg in opt.param_groups]

    def current_lr(self) -> float:
        return self.cfg.lr * lr_factor(min(self.step_count, self.total_steps - 1), self.total_steps, self.cfg)

    def _set_lr(self) -> None:
        base = self.current_lr()
        for pg in self.param_groups:
            pg["lr"] = base * pg["lr_mult"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self) -> dict[str, float]:
        """One update of every group; returns {"lr", "grad_norm", per-group "grad_norm/…", "update_rms/…"}."""
        self._set_lr()
        stats: dict[str, float] = {"lr": self.current_lr()}
        params = [p for pg in self.param_groups for p in pg["params"] if p.grad is not None]
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(_full(p.grad).float()) for p in params])) if params else None
        if total is not None:
            stats["grad_norm"] = float(total)
            if self.cfg.grad_clip is not None:
                torch.nn.utils.clip_grads_with_norm_(params, self.cfg.grad_clip, total)
        before = {}
        if self.cfg.log_stats:
            for pg in self.param_groups:
                grads = [_full(p.grad).float() for p in pg["params"] if p.grad is not None]
                if grads:
                    stats[f"grad_norm/{pg['label']}"] = float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads])))
                before[pg["label"]] = [p.detach().clone() for p in pg["params"]]
        for opt in self.optimizers.values():
            opt.step()
        if self.master_weights == "bf16":
            for pg in self.param_groups:
                for p in pg["params"]:
                    p.copy_(round_to_format(p, BF16, stochastic=True).to(p.dtype))
        for pg in self.param_groups:
            if pg["label"] in before:
                diff = torch.cat([(_full(p) - _full(b)).float().reshape(-1)
                                  for p, b in zip(pg["params"], before[pg["label"]], strict=True)])
                stats[f"update_rms/{pg['label']}"] = float(diff.pow(2).mean().sqrt())
        self.step_count += 1
        return stats

    def state_dict(self) -> dict:
        return {"step": self.step_count, **{k: opt.state_dict() for k, opt in self.optimizers.items()}}

    def load_state_dict(self, state: Mapping) -> None:
        missing = set(self.optimizers) - set(state)
        if missing:
            raise ValueError(f"optimizer checkpoint lacks {sorted(missing)}; was it saved with another optim.name?")
        for k, opt in self.optimizers.items():
            opt.load_state_dict(state[k])
        self.step_count = int(state["step"])
        self._set_lr()


def build_optimizer(
    model: nn.Module,
    cfg: OptimConfig,
    total_steps: int,
    lr_multipliers: Mapping[str, float] | None = None,
    master_weights: str | None = None,
) -> MultiOptimizer:
    """The optimizer for `model`: groups by `cfg` rules; muP multipliers from the model unless given.

    A model that defines `lr_multipliers()` (shared.model's MoETransformer does, per its muP table)
    supplies them when `lr_multipliers` is None; `master_weights` defaults to the model config's
    `moe.precision.master_weights` (else fp32).
    """
    if lr_multipliers is None and hasattr(model, "lr_multipliers"):
        lr_multipliers = model.lr_multipliers()
    if master_weights is None:
        precision = getattr(getattr(getattr(model, "cfg", None), "moe", None), "precision", None)
        master_weights = precision.master_weights if precision is not None else "fp32"
    return MultiOptimizer(build_groups(model, cfg, lr_multipliers), cfg, total_steps, master_weights)
