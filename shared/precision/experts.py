"""Low-precision routed experts and linear layers: where `model.moe.precision` meets the model.

The routed experts keep `shared.kernels`' permute → SwiGLU → unpermute path and swap only their
grouped GEMMs (the `gmm` seam) for `lp_grouped_linear` (same (E, out, in) weight layout), so
routing, capacity drops and the combine are the same code in every precision. `LowPrecisionLinear`
is an `nn.Linear` whose GEMMs go through `lp_linear`; `apply_precision` swaps it in for the
shared experts (expert mode) and for attention / dense-FFN projections (dense mode), keeping the
same `Parameter` objects so names, init, optimizer groups and checkpoints are unchanged. The
output head stays in high precision (as in DeepSeek-V3 and NVIDIA's NVFP4 recipe).
"""

from __future__ import annotations

from torch import Tensor, nn

from shared.config.precision import PrecisionConfig
from shared.precision.matmul import lp_grouped_linear, lp_linear
from shared.precision.recipe import GemmRecipe, gemm_recipe


class LowPrecisionGroupedMM:
    """Drop-in for `shared.kernels.grouped_mm(x, w, counts, backend)` that runs under a recipe.

    The routed experts call their grouped GEMM through the `gmm` attribute (the seam
    `shared.kernels.dispatch` exposes); this object keeps their permute → SwiGLU → unpermute path
    and swaps only the GEMMs. `backend` is ignored: the emulation is its own backend.
    """

    def __init__(self, recipe: GemmRecipe) -> None:
        self.recipe = recipe

    def __call__(self, x: Tensor, w: Tensor, counts: Tensor, backend: str = "auto") -> Tensor:
        return lp_grouped_linear(x, w, counts, self.recipe)

    def __repr__(self) -> str:
        return f"LowPrecisionGroupedMM({self.recipe.mode})"


class LowPrecisionLinear(nn.Linear):
    """`nn.Linear` whose GEMMs (forward, Dgrad, Wgrad) run under a `GemmRecipe`."""

    recipe: GemmRecipe

    @classmethod
    def wrap(cls, linear: nn.Linear, recipe: GemmRecipe) -> LowPrecisionLinear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.recipe = recipe
        return new

    def forward(self, x: Tensor) -> Tensor:
        y = lp_linear(x, self.weight, self.recipe)
        return y if self.bias is None else y + self.bias


def _swap_linears(module: nn.Module, recipe: GemmRecipe, skip: tuple[str, ...] = ()) -> int:
    swapped = 0
    for name, child in list(module.named_children()):
        if name in skip:
            continue
        if type(child) is nn.Linear:
            setattr(module, name, LowPrecisionLinear.wrap(child, recipe))
            swapped += 1
        elif not hasattr(child, "gmm"):
            swapped += _swap_linears(child, recipe, skip)
    return swapped


def apply_precision(model: nn.Module, cfg: PrecisionConfig) -> dict[str, int]:
    """Route the model's GEMMs through `shared.precision` per `cfg`; returns counts of what changed.

    Modules with a `gmm` grouped-GEMM seam (the routed experts) get the expert recipe; each
    MoE layer's `shared` SwiGLU gets the expert recipe; every other `nn.Linear` except `lm_head`
    gets the dense recipe. A mode whose recipe is inactive (plain bf16) changes nothing.
    """
    expert, dense = gemm_recipe(cfg, cfg.expert), gemm_recipe(cfg, cfg.dense)
    counts = {"routed_experts": 0, "expert_linears": 0, "dense_linears": 0}
    for module in model.modules():
        if hasattr(module, "gmm") and expert.active:
            module.gmm = LowPrecisionGroupedMM(expert)
            counts["routed_experts"] += 1
        shared = getattr(module, "shared", None)
        if hasattr(module, "router") and isinstance(shared, nn.Module) and expert.active:
            counts["expert_linears"] += _swap_linears(shared, expert)
    if dense.active:
        counts["dense_linears"] = _swap_linears(model, dense, skip=("lm_head", "shared", "router"))
    return counts
