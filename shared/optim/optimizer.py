"""`build_optimizer`: Muon + AdamW from config rules, muP multipliers, schedule, stats, checkpoints.

One object drives both optimizers so the trainer sees a single `step()`: it sets every group's
LR to peak · schedule(step) · muP multiplier (AdamW fused where the device has the kernel:
`adamw_fused`), optionally clips the global gradient norm (off by
default: the Kaiju-style recipe trains without clipping), steps Muon and AdamW, optionally rounds
the weights stochastically to bf16 (bf16 master weights, `model.moe.precision.master_weights`),
and returns per-group gradient norm and update RMS for logging. `state_dict()` carries both
optimizers' state and the step counter, so a resumed run continues exactly.

Norms are sums over parameters that may be sharded. A `ParamSum` turns per-parameter local sums
into the global sum with every element counted once; the default handles FSDP2 DTensors (their
local pieces are partial sums) and plain tensors (whole). A parallel trainer whose parameters
are plain shards (expert parallelism) passes its own, so every rank clips by the same factor and
logs the same norm.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from shared.config.optim import OptimConfig
from shared.optim.groups import GroupSpec, build_groups
from shared.optim.muon import Muon
from shared.optim.schedule import lr_factor
from shared.precision.formats import BF16, round_to_format

# [(parameter, a float32 sum over this rank's part of it)] -> the sum over the whole parameter set
ParamSum = Callable[[Sequence[tuple[nn.Parameter, torch.Tensor]]], torch.Tensor]


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def dtensor_param_sum(pairs: Sequence[tuple[nn.Parameter, torch.Tensor]]) -> torch.Tensor:
    """Default `ParamSum`: a DTensor parameter's local sum is partial (all-reduced over its mesh
    through DTensor); a plain parameter's is whole."""
    total = torch.zeros((), dtype=torch.float32)
    for p, value in pairs:
        value = value.float().cpu()
        if isinstance(p, DTensor):
            from torch.distributed.tensor import Partial

            value = DTensor.from_local(value.to(p.device), p.device_mesh, [Partial()] * p.device_mesh.ndim).full_tensor().cpu()
        total = total + value
    return total


def _sq(t: torch.Tensor) -> torch.Tensor:
    return _local(t).float().pow(2).sum()


def _numel(p: torch.Tensor) -> torch.Tensor:
    return torch.tensor(float(_local(p).numel()))


def adamw_fused(impl: str, params: Sequence[torch.Tensor]) -> bool:
    """Whether AdamW runs its fused kernel (`optim.adamw_impl`).

    Why fused: torch's foreach AdamW is about a dozen multi-tensor kernels per step, each a pass
    over every parameter and state tensor; the fused one reads and writes each once. It is the same
    update to float rounding (a few ulps: tests/shared/optim). `auto` fuses on CUDA and for plain
    CPU tensors (torch 2.13 has the CPU kernel); sharded DTensor parameters off CUDA keep foreach,
    the combination torch's fused path is tested with least."""
    if impl not in ("auto", "fused", "foreach"):
        raise ValueError(f"unknown AdamW implementation {impl!r}; use auto, fused or foreach")
    if impl != "auto":
        return impl == "fused"
    return all(p.device.type == "cuda" or (p.device.type == "cpu" and not isinstance(p, DTensor)) for p in params)


class MultiOptimizer:
    """Muon and AdamW over disjoint parameter groups, stepped together."""

    def __init__(
        self,
        groups: list[GroupSpec],
        cfg: OptimConfig,
        total_steps: int,
        master_weights: str = "fp32",
        param_sum: ParamSum = dtensor_param_sum,
    ) -> None:
        if master_weights not in ("fp32", "bf16"):
            raise ValueError(f"master_weights must be fp32 or bf16, got {master_weights!r}")
        self.cfg, self.total_steps, self.master_weights = cfg, total_steps, master_weights
        self.groups = groups
        self.param_sum = param_sum
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
            params = [p for g in adamw for p in g["params"]]
            kernels = {"fused": True} if adamw_fused(cfg.adamw_impl, params) else {"foreach": True}
            self.optimizers["adamw"] = torch.optim.AdamW(
                adamw, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay, **kernels
            )
        self._set_lr()

    def _torch_group(self, g: GroupSpec) -> dict:
        wd = self.cfg.weight_decay if g.decay else 0.0
        if self.cfg.decay_scaling == "independent" and g.lr_mult > 0:
            wd /= g.lr_mult  # torch decays by lr·wd and lr carries the muP multiplier: divide it back out
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

    def grad_norm(self, params: Sequence[nn.Parameter]) -> torch.Tensor:
        """The global L2 norm of the gradients of `params` (every shard counted once)."""
        return self.param_sum([(p, _sq(p.grad)) for p in params]).sqrt()

    @torch.no_grad()
    def step(self) -> dict[str, float]:
        """One update of every group; returns {"lr", "grad_norm", per-group "grad_norm/…", "update_rms/…"}."""
        self._set_lr()
        stats: dict[str, float] = {"lr": self.current_lr()}
        params = [p for pg in self.param_groups for p in pg["params"] if p.grad is not None]
        if params:
            total = float(self.grad_norm(params))
            stats["grad_norm"] = total
            if self.cfg.grad_clip is not None:
                coef = min(1.0, self.cfg.grad_clip / (total + 1e-6))
                if coef < 1.0:
                    for p in params:
                        p.grad.mul_(coef)
        before = {}
        if self.cfg.log_stats:
            for pg in self.param_groups:
                with_grad = [p for p in pg["params"] if p.grad is not None]
                if with_grad:
                    stats[f"grad_norm/{pg['label']}"] = float(self.grad_norm(with_grad))
                before[pg["label"]] = [_local(p).detach().clone() for p in pg["params"]]
        for opt in self.optimizers.values():
            opt.step()
        if self.master_weights == "bf16":
            for pg in self.param_groups:
                for p in pg["params"]:
                    p.copy_(round_to_format(p, BF16, stochastic=True).to(p.dtype))
        for pg in self.param_groups:
            if pg["label"] in before:
                pairs = list(zip(pg["params"], before[pg["label"]], strict=True))
                sq = self.param_sum([(p, (_local(p) - b).float().pow(2).sum()) for p, b in pairs])
                count = self.param_sum([(p, _numel(p)) for p, _ in pairs])
                stats[f"update_rms/{pg['label']}"] = float((sq / count).sqrt())
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
    param_sum: ParamSum = dtensor_param_sum,
) -> MultiOptimizer:
    """The optimizer for `model`: groups by `cfg` rules; muP multipliers from the model unless given.

    A model that carries `mup_scalings` (shared.model's MoETransformer does: every parameter's
    role and muP shape facts) supplies each parameter's optimizer-aware LR multiplier;
    `lr_multipliers` overrides them by name. `master_weights` defaults to the model config's
    `moe.precision.master_weights` (else fp32). `param_sum` makes norms global (see ParamSum).
    """
    scalings = getattr(model, "mup_scalings", None)
    if master_weights is None:
        precision = getattr(getattr(getattr(model, "cfg", None), "moe", None), "precision", None)
        master_weights = precision.master_weights if precision is not None else "fp32"
    groups = build_groups(model, cfg, lr_multipliers, scalings)
    return MultiOptimizer(groups, cfg, total_steps, master_weights, param_sum)


__all__ = ["MultiOptimizer", "ParamSum", "adamw_fused", "build_optimizer", "dtensor_param_sum"]
