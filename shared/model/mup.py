"""muP per matrix (Yang et al. 2022, "Tensor Programs V", arXiv:2203.03466, Table 3 and Table 8).

Every weight's multipliers come from its own shape compared with the same weight in the *base*
model (the tuned proxy): fan_in B and fan_out A against B₀ and A₀. A dimension whose size differs
from the base is "infinite" in muP's sense (it grows with width); one equal to the base is finite.
That classifies each matrix the way TP5's Table 3 does, per matrix rather than per model:

| matrix (linear layout, experts included) | infinite dims   | init std          | Adam LR       |
|------------------------------------------|-----------------|-------------------|---------------|
| hidden                                   | fan_in, fan_out | init_std·√(B₀/B)  | × B₀/B        |
| input-like (fan_in fixed, e.g. the up-projection of a fixed-rank latent) | fan_out | init_std | × 1 |
| output-like (fan_out fixed: the router, a fixed-rank down-projection)    | fan_in  | init_std·B₀/B | × B₀/B |

The token embedding keeps init_std and LR × 1 and its forward multiplier (10.66). The LM head keeps
init_std and LR × 1 and takes muP's output rule as a forward multiplier, logits × 0.125·B₀/B
(Table 8 allows moving it there). Vectors, scalars (norm gains, the bungee), convolution kernels
(a depthwise kernel's fan-in is its few taps: finite) and tables such as learned positions keep
their init and LR × 1. Muon's LR multiplier is not Adam's; shared/optim/scaling.py derives it from the
same fan-ins and fan-outs.

The base model is this model with `mup.base_width` as d_model and `mup.base_shapes` (other width
fields, e.g. `moe.expert_hidden`) applied; a field that is not listed keeps this model's value, so
it is finite. With `mup.enabled: false` every multiplier is 1 and every matrix gets init_std
(standard parameterisation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from shared.config.model import ModelConfig

ROLES = ("embedding", "head", "matrix", "conv", "vector")
# Names of modules that wrap others without changing what they compute (activation checkpointing,
# torch.compile); they are dropped when matching a wrapped model's parameters to these names.
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def clean_name(name: str) -> str:
    """A parameter's name without activation-checkpoint / compile wrapper segments."""
    for seg in WRAPPER_SEGMENTS:
        name = name.replace(seg, "")
    return name


@dataclass(frozen=True)
class ParamScaling:
    """One parameter's muP facts: its role, and fan-in/fan-out here and in the base model."""

    role: str
    fan_in: int = 1
    fan_out: int = 1
    base_fan_in: int = 1
    base_fan_out: int = 1

    @property
    def in_ratio(self) -> float:
        return self.fan_in / self.base_fan_in

    @property
    def out_ratio(self) -> float:
        return self.fan_out / self.base_fan_out

    @property
    def shape_class(self) -> str:
        """'hidden', 'input', 'output' or 'finite' (which of fan_in / fan_out differ from the base)."""
        grows_in, grows_out = self.fan_in != self.base_fan_in, self.fan_out != self.base_fan_out
        if grows_in and grows_out:
            return "hidden"
        return "output" if grows_in else "input" if grows_out else "finite"

    @property
    def init_multiplier(self) -> float:
        """Multiplier on init_std (matrices only; other roles keep the init they were built with)."""
        if self.role != "matrix":
            return 1.0
        if self.shape_class == "output":
            return 1.0 / self.in_ratio
        return self.in_ratio ** -0.5

    @property
    def adam_lr_multiplier(self) -> float:
        """Adam-family LR multiplier: 1/fan_in ratio for matrices (hidden and output-like), 1 otherwise."""
        return 1.0 / self.in_ratio if self.role == "matrix" else 1.0


def width_ratio(cfg: ModelConfig) -> float:
    """d_model / base d_model: the LM head's fan-in ratio (1 without muP)."""
    return cfg.d_model / cfg.mup.base_width if cfg.mup.enabled else 1.0


def embedding_multiplier(cfg: ModelConfig) -> float:
    return cfg.mup.embedding_multiplier if cfg.mup.enabled else 1.0


def logit_multiplier(cfg: ModelConfig) -> float:
    return cfg.mup.output_multiplier / width_ratio(cfg) if cfg.mup.enabled else 1.0


def _linear_fans(shape: torch.Size) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight in nn.Linear (out, in) layout, or a stack of them (..., out, in)."""
    return int(shape[-1]), int(shape[-2])


def param_roles(model: nn.Module) -> dict[str, str]:
    """{parameter name: role} from the module that owns each parameter (see ROLES)."""
    from shared.model.experts import RoutedExperts
    from shared.model.router import Router

    roles: dict[str, str] = {}
    head = getattr(model, "lm_head", None)
    for mod_name, module in model.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            if isinstance(module, nn.Embedding):
                role = "embedding"
            elif module is head and p_name == "weight":
                role = "head"
            elif isinstance(module, nn.Linear | Router) and p_name in ("weight", "weight_ED"):
                role = "matrix"
            elif isinstance(module, RoutedExperts) or (p.dim() == 3 and p_name.startswith("w") and "_E" in p_name):
                role = "matrix"
            elif isinstance(module, nn.modules.conv._ConvNd) and p_name == "weight":
                role = "conv"
            else:
                role = "vector"
            roles[clean_name(name)] = role
    return roles


def param_scalings(model: nn.Module, cfg: ModelConfig) -> dict[str, ParamScaling]:
    """{parameter name: ParamScaling} for every parameter of `model` (built from `cfg`)."""
    roles = param_roles(model)
    shapes = {clean_name(n): p.shape for n, p in model.named_parameters()}
    if not cfg.mup.enabled:
        base_shapes = shapes
    else:
        from shared.model.transformer import MoETransformer

        with torch.device("meta"):
            base = MoETransformer(cfg.mup_base())
        base_shapes = {clean_name(n): p.shape for n, p in base.named_parameters()}
    out: dict[str, ParamScaling] = {}
    for name, role in roles.items():
        shape, base_shape = shapes[name], base_shapes.get(name)
        if base_shape is None or len(base_shape) != len(shape):
            raise ValueError(
                f"model.mup.base_shapes change the architecture: parameter {name!r} has shape {tuple(shape)} "
                f"here but {None if base_shape is None else tuple(base_shape)} in the base model; list only width fields"
            )
        if role in ("matrix", "head"):
            (fi, fo), (bfi, bfo) = _linear_fans(shape), _linear_fans(base_shape)
            out[name] = ParamScaling(role, fi, fo, bfi, bfo)
        elif role == "embedding":  # a (vocab, width) table: fan-in is the one-hot vocabulary
            out[name] = ParamScaling(role, int(shape[0]), int(shape[1]), int(base_shape[0]), int(base_shape[1]))
        else:
            out[name] = ParamScaling(role)
    return out


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig, scalings: dict[str, ParamScaling]) -> None:
    """Normal init of embeddings, head and every matrix with its muP std; other roles keep theirs."""
    for name, p in model.named_parameters():
        s = scalings[clean_name(name)]
        if s.role in ("embedding", "head"):
            nn.init.normal_(p, std=cfg.init_std)
        elif s.role == "matrix":
            nn.init.normal_(p, std=cfg.init_std * s.init_multiplier)
