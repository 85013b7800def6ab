"""Low-precision routed experts and linear layers: where `model.moe.precision` meets the model.

The routed experts keep `shared.kernels`' permute → SwiGLU → unpermute path and swap only their
grouped GEMMs (the `gmm` seam) for `LowPrecisionGroupedMM` (same (E, out, in) weight layout), so
routing, capacity drops and the combine are the same code in every precision. `LowPrecisionLinear`
is an `nn.Linear` whose GEMMs run under the recipe; `apply_precision` swaps it in for the shared
experts (expert mode) and for attention / dense-FFN projections (dense mode), keeping the same
`Parameter` objects so names, init, optimizer groups and checkpoints are unchanged. The output
head stays in high precision (as in DeepSeek-V3 and NVIDIA's NVFP4 recipe).

Backends (`precision.backend`): `te` runs the GEMMs of CUDA tensors through transformer-engine
(`shared.precision.te_backend`), `native` through PyTorch's own fp8 GEMMs (`torch._scaled_mm`,
`shared.precision.native`; the routed experts' per-row recipe on the ragged grouped path with their
fp8 weights cached once per optimizer step), `torchao` through torchao's fp8 row-wise MoE grouped
GEMM (`shared.precision.torchao_backend`, explicit only), `emulate` through the quantise → dequantise emulation
(`shared.precision.matmul`). `auto` picks, per mode, te where TE is installed and can run the
recipe on this GPU, else native where the GPU and torch can, else the emulation (so a CPU run of
a GPU config emulates), and logs the choice and why; `model.precision_backends` keeps it for the
trainer to report. With
delayed fp8 scaling each GEMM site keeps its amax history in a `DelayedScalingState` buffer
(`...gmm.delayed.<out>x<in>.amax_history`, `...w1.delayed.amax_history`), saved with checkpoints.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from shared.config.precision import PrecisionConfig
from shared.precision.delayed import DelayedScalingState
from shared.precision.matmul import lp_grouped_linear, lp_linear
from shared.precision.native import native_grouped_linear, native_linear, native_status, tensor_scale_form
from shared.precision.recipe import GemmRecipe, gemm_recipe
from shared.precision.te_backend import TELinearRunner, te_autocast, te_grouped_linear, te_status
from shared.precision.torchao_backend import torchao_grouped_linear, torchao_linear, torchao_status
from shared.precision.weight_cache import WeightQuantCache

log = logging.getLogger(__name__)


def _site(out_features: int, in_features: int) -> str:
    return f"{out_features}x{in_features}"


class LowPrecisionGroupedMM(nn.Module):
    """Drop-in for `shared.kernels.grouped_mm(x, w, counts, backend)` that runs under a recipe.

    The routed experts call their grouped GEMM through the `gmm` attribute (the seam
    `shared.kernels.dispatch` exposes); this module keeps their permute → SwiGLU → unpermute path
    and swaps only the GEMMs. The kernels' `backend` argument is ignored: the precision backend
    (TE or emulation) is its own. It holds no parameters; with delayed scaling it holds one
    `DelayedScalingState` per GEMM site, keyed by the weight's (out, in) shape — the experts'
    SwiGLU calls it for the fused gate/up weight (2F, D) and the down weight (D, F). On the native
    backend `weight_cache` keeps each weight's fp8 layouts from one optimizer step to the next
    (not a buffer: never checkpointed, rebuilt after a load).
    """

    def __init__(
        self, recipe: GemmRecipe, n_groups: int = 1, sites: tuple[tuple[int, int], ...] = (),
        te: TELinearRunner | None = None, require_te: bool = False, native: bool = False,
        require_native: bool = False, torchao: tuple[bool, bool] = (False, False),
    ) -> None:  # fmt: skip
        super().__init__()
        self.recipe, self.n_groups, self.te, self.require_te = recipe, n_groups, te, require_te
        self.native, self.require_native = native, require_native
        self.torchao, self.require_torchao = torchao
        self.weight_cache = WeightQuantCache()
        self.delayed = nn.ModuleDict()
        if recipe.delayed is not None:
            for out_f, in_f in sites:
                self.delayed[_site(out_f, in_f)] = DelayedScalingState(n_groups, recipe.delayed)

    def _state(self, w: Tensor) -> DelayedScalingState | None:
        if self.recipe.delayed is None:
            return None
        key = _site(w.shape[1], w.shape[2])
        if key not in self.delayed:  # a GEMM shape not declared at apply time: its history starts now
            self.delayed[key] = DelayedScalingState(w.shape[0], self.recipe.delayed).to(w.device)
        return self.delayed[key]

    def forward(self, x: Tensor, w: Tensor, counts: Tensor, backend: str = "auto") -> Tensor:
        if self.te is not None and (x.is_cuda or self.require_te):
            counts_list = [int(c) for c in (counts.tolist() if torch.is_tensor(counts) else counts)]
            return te_grouped_linear(self.te, (w.shape[1], w.shape[2]), x, w, counts_list)
        if self.torchao and (x.is_cuda or self.require_torchao):
            return torchao_grouped_linear(x, w, counts)
        if self.native and (x.is_cuda or self.require_native):
            return native_grouped_linear(x, w, counts, self.recipe, self._state(w), self.weight_cache)
        return lp_grouped_linear(x, w, counts, self.recipe, self._state(w))

    def extra_repr(self) -> str:
        backend = "te" if self.te is not None else "native" if self.native else "torchao" if self.torchao else "emulate"
        return f"{self.recipe.mode}, backend={backend}"


class LowPrecisionLinear(nn.Linear):
    """`nn.Linear` whose GEMMs (forward, Dgrad, Wgrad) run under a `GemmRecipe` (TE or emulation)."""

    recipe: GemmRecipe

    @classmethod
    def wrap(
        cls, linear: nn.Linear, recipe: GemmRecipe, te: TELinearRunner | None = None, require_te: bool = False,
        native: tuple[bool, bool] = (False, False), torchao: tuple[bool, bool] = (False, False),
    ) -> LowPrecisionLinear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.recipe = recipe
        new._te = {"runner": te, "require": require_te}  # a dict, so TE's module is not a submodule
        new._native = {"use": native[0], "require": native[1]}
        new._torchao = {"use": torchao[0], "require": torchao[1]}
        if recipe.delayed is not None:
            new.delayed = DelayedScalingState(1, recipe.delayed).to(linear.weight.device)
        return new

    def forward(self, x: Tensor) -> Tensor:
        runner = self._te["runner"]
        if runner is not None and (x.is_cuda or self._te["require"]):
            y = runner.linear("linear", x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)
        elif self._torchao["use"] and (x.is_cuda or self._torchao["require"]):
            y = torchao_linear(x, self.weight)
        elif self._native["use"] and (x.is_cuda or self._native["require"]):
            y = native_linear(x, self.weight, self.recipe, getattr(self, "delayed", None))
        else:
            y = lp_linear(x, self.weight, self.recipe, getattr(self, "delayed", None))
        return y if self.bias is None else y + self.bias


def _swap_linears(
    module: nn.Module, recipe: GemmRecipe, choice: BackendChoice, te: TELinearRunner | None, skip: tuple[str, ...] = ()
) -> int:
    swapped = 0
    for name, child in list(module.named_children()):
        if name in skip:
            continue
        if isinstance(child, nn.Linear) and not isinstance(child, LowPrecisionLinear):
            runner = _fresh_runner(te)  # each layer its own TE module (its own delayed-scaling history)
            native = (choice.backend == "native", choice.require)
            torchao = (choice.backend == "torchao", choice.require)
            setattr(module, name, LowPrecisionLinear.wrap(child, recipe, runner, choice.require and te is not None, native,
                                                          torchao))
            swapped += 1
        elif not hasattr(child, "gmm"):
            swapped += _swap_linears(child, recipe, choice, te, skip)
    return swapped


def _fresh_runner(te: TELinearRunner | None) -> TELinearRunner | None:
    return None if te is None else TELinearRunner(te.cfg, te.mode)


@dataclass(frozen=True)
class BackendChoice:
    """Where one mode's GEMMs run: te | native | emulate; `require` = refuse CPU tensors (explicit
    backend); `why` = the reason for the choice (what the faster backends lacked)."""

    backend: str
    require: bool = False
    why: str = ""


def _scale_note(cfg: PrecisionConfig, shape_only: bool) -> str:
    """Which form of per-tensor scale the probe found this GPU's `torch._scaled_mm` running."""
    if shape_only or cfg.fp8_granularity != "tensor" or not torch.cuda.is_available():
        return ""
    return f" (per-tensor scales passed as {tensor_scale_form(torch.device('cuda', torch.cuda.current_device()))})"


def resolve_backend(cfg: PrecisionConfig, mode: str, shape_only: bool = False) -> BackendChoice:
    """The backend `mode`'s GEMMs use under `cfg`; raises when an explicit te/native cannot run here.

    auto: te when TE is installed, has the recipe and this GPU runs it; else native when this GPU
    and torch run the recipe's fp8 GEMMs (`native_status` probes them); else the emulation. A
    shape-only model (meta device, e.g. `moelab plan`) never runs a GEMM, so nothing is required.
    """
    if mode == "bf16":
        return BackendChoice("none", why="bf16 GEMMs are plain (autocast) matmuls")
    if cfg.backend == "emulate":
        return BackendChoice("emulate", why="precision.backend=emulate")
    if cfg.backend == "torchao":
        torchao_why = None if shape_only else torchao_status(cfg, mode)
        if torchao_why:
            raise RuntimeError(
                f"model.moe.precision.backend=torchao, but {torchao_why}. "
                "Use backend=native (our fp8 path), auto or emulate."
            )
        return BackendChoice("torchao", require=not shape_only, why="precision.backend=torchao")
    te_why = cfg.te_unsupported_reason(mode) or te_status(cfg, mode)
    if cfg.backend == "te":
        if te_why and not shape_only:
            raise RuntimeError(
                f"model.moe.precision.backend=te, but {te_why}. "
                "Use backend=auto (TE where it can run, then native fp8, then the emulation) or backend=emulate."
            )
        return BackendChoice("te", require=not shape_only, why="precision.backend=te")
    if cfg.backend == "native":
        native_why = None if shape_only else native_status(cfg, mode)
        if native_why:
            raise RuntimeError(
                f"model.moe.precision.backend=native, but {native_why}. "
                "Use backend=auto (emulation where native fp8 cannot run) or backend=emulate."
            )
        return BackendChoice("native", require=not shape_only, why="precision.backend=native" + _scale_note(cfg, shape_only))
    if te_why is None:
        return BackendChoice("te", why="transformer-engine runs this recipe here")
    native_why = cfg.native_unsupported_reason(mode) if shape_only else native_status(cfg, mode)
    if native_why is None:
        return BackendChoice(
            "native", why=f"transformer-engine: {te_why}; torch._scaled_mm runs the recipe" + _scale_note(cfg, shape_only)
        )
    return BackendChoice("emulate", why=f"transformer-engine: {te_why}; native: {native_why}")


def apply_precision(model: nn.Module, cfg: PrecisionConfig) -> dict[str, int]:
    """Route the model's GEMMs through `shared.precision` per `cfg`; returns counts of what changed.

    Modules with a `gmm` grouped-GEMM seam (the routed experts) get the expert recipe; each
    MoE layer's `shared` SwiGLU gets the expert recipe; every other `nn.Linear` except `lm_head`
    gets the dense recipe. A mode whose recipe is inactive (plain bf16) changes nothing. A model
    built on the meta device (shape only, e.g. `moelab precision-report`) never runs a GEMM, so
    backend=te/native does not require them there. When TE runs any GEMM, a TE autocast region
    wraps the whole forward (hooks on `model`), so delayed-scaling amaxes update once per step as
    in TE. The backend of each active mode is logged (a warning when a CUDA machine emulates) and
    kept in `model.precision_backends` ({"expert"|"dense": {"mode", "backend", "why"}}).
    """
    shape_only = any(p.device.type == "meta" for p in model.parameters())
    expert, dense = gemm_recipe(cfg, cfg.expert), gemm_recipe(cfg, cfg.dense)
    choices = {mode: resolve_backend(cfg, mode, shape_only) for mode in {cfg.expert, cfg.dense}}
    runners = {mode: TELinearRunner(cfg, mode) if c.backend == "te" and not shape_only else None
               for mode, c in choices.items()}  # fmt: skip
    counts = {"routed_experts": 0, "expert_linears": 0, "dense_linears": 0}
    for module in list(model.modules()):
        if hasattr(module, "gmm") and expert.active:
            c = choices[cfg.expert]
            module.gmm = LowPrecisionGroupedMM(
                expert, _n_experts(module), _expert_sites(module), _fresh_runner(runners[cfg.expert]),
                c.require and c.backend == "te", c.backend == "native", c.require and c.backend == "native",
                (c.backend == "torchao", c.require and c.backend == "torchao"),
            )  # fmt: skip
            counts["routed_experts"] += 1
        shared = getattr(module, "shared", None)
        if hasattr(module, "router") and isinstance(shared, nn.Module) and expert.active:
            counts["expert_linears"] += _swap_linears(shared, expert, choices[cfg.expert], runners[cfg.expert])
    if dense.active:
        counts["dense_linears"] = _swap_linears(
            model, dense, choices[cfg.dense], runners[cfg.dense], skip=("lm_head", "shared", "router")
        )
    outer = cfg.expert if expert.active and runners[cfg.expert] else cfg.dense if dense.active else None
    if outer is not None and runners[outer] is not None:
        _wrap_forward_in_te_autocast(model, runners[outer].recipe, choices[outer].require)
    model.precision_backends = _report_choices(cfg, choices, {"expert": expert.active, "dense": dense.active}, shape_only)
    return counts


def _report_choices(cfg: PrecisionConfig, choices: dict[str, BackendChoice], active: dict[str, bool],
                    shape_only: bool) -> dict[str, dict[str, str]]:
    report = {}
    for role, mode in (("expert", cfg.expert), ("dense", cfg.dense)):
        if not active[role]:
            continue
        c = choices[mode]
        report[role] = {"mode": mode, "backend": c.backend, "why": c.why}
        if shape_only:
            continue
        msg = f"precision: {role} GEMMs in {mode} run on {c.backend} ({c.why})"
        # a GPU run that emulates is many times slower than it needs to be: say so loudly
        (log.warning if c.backend == "emulate" and torch.cuda.is_available() else log.info)(msg)
    return report


def _n_experts(module: nn.Module) -> int:
    w1 = getattr(module, "w1_EFD", None)
    return w1.shape[0] if isinstance(w1, Tensor) else 1


def _expert_sites(module: nn.Module) -> tuple[tuple[int, int], ...]:
    """The (out, in) shapes the experts' SwiGLU runs: fused gate/up (2F, D) and down (D, F)."""
    w1, w3, w2 = (getattr(module, n, None) for n in ("w1_EFD", "w3_EFD", "w2_EDF"))
    if not all(isinstance(t, Tensor) for t in (w1, w3, w2)):
        return ()
    return ((w1.shape[1] + w3.shape[1], w1.shape[2]), (w2.shape[1], w2.shape[2]))


def _wrap_forward_in_te_autocast(model: nn.Module, recipe, always: bool) -> None:
    """Enter one TE autocast per model forward (for CUDA inputs, or `always` under backend=te);
    per-GEMM autocasts nest inside it.

    TE reduces and rolls delayed-scaling amaxes when the outermost autocast exits (forward) and in
    the backward of the first TE module of that region, i.e. once per step; without this outer
    region each GEMM's own autocast would roll every history once per GEMM call.
    """
    stack: list = []

    def enter(_module, args):
        first = args[0] if args else None
        on_te = always or (isinstance(first, Tensor) and first.is_cuda)
        ctx = te_autocast(recipe) if on_te else None
        if ctx is not None:
            ctx.__enter__()
        stack.append(ctx)

    def leave(_module, _args, _out):
        ctx = stack.pop() if stack else None
        if ctx is not None:
            ctx.__exit__(None, None, None)

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)
