"""transformer-engine on CUDA: the hardware fp8 / nvfp4 GEMMs that the emulation stands in for.

Written against TE 2.x and checked (source and docs, not run here: no GPU) against TE 2.19:
`te.autocast(enabled=, recipe=)` (TE >= 2.8; older releases only have `te.fp8_autocast(enabled=,
fp8_recipe=)`, which 2.19 still accepts with a DeprecationWarning — `te_autocast` uses whichever
exists), the recipe classes of `transformer_engine.common.recipe`, and `te.Linear`, whose forward
reads its weight through `getattr(self, "weight")` (`_get_weight_tensors`).

`te_recipe` maps a `PrecisionConfig` to TE's recipe objects: `Float8CurrentScaling` /
`DelayedScaling` for per-tensor scales, `Float8BlockScaling` for DeepSeek-style 1×128 / 128×128
blocks (with fp32 scales, as the emulation and DeepSeek-V3 use; TE's default is power-of-two),
`MXFP8BlockScaling`, `NVFP4BlockScaling` (RHT on the Wgrad inputs, stochastic gradient rounding
and 16×16 weight blocks switched by our knobs). Per-row fp8 scaling has no TE recipe and stays
emulated (`PrecisionConfig.te_unsupported_reason`).

Why a per-expert loop of `te.Linear` and not `te.GroupedLinear`: `GroupedLinear` owns its
weights (`weight0` … `weightN` parameters) while ours is one (E, out, in) parameter that names,
optimizer groups and checkpoints refer to; its recipe coverage also varies by release (current
scaling and MXFP8 arrived after 2.0, fp8 block scaling in 2.18), and the ops-API `GroupedLinear`
is marked experimental. `TELinearRunner` keeps a weight-less `te.Linear` per GEMM shape and, for
each call, puts our weight slice in its parameter slot for the duration of the forward (autograd
carries the weight gradient back to our parameter). This is the correct-first path; a grouped
kernel is future work. Rows of every call are zero-padded to TE's alignment (16; 32 for MXFP8;
128 for NVFP4, `get_align_size_for_quantization`), which changes no scale.
"""

from __future__ import annotations

import importlib.util

import torch

from shared.config.precision import PrecisionConfig


def te_status(cfg: PrecisionConfig | None = None, mode: str | None = None) -> str | None:
    """Why transformer-engine cannot run here (None when it can); with `cfg` and `mode`, also why it
    cannot run that recipe: no such recipe in the installed TE, or not on this chip (MXFP8 and
    NVFP4 need Blackwell, fp8 block scaling Hopper and CUDA >= 12.9)."""
    if not torch.cuda.is_available():
        return "no CUDA device is visible (transformer-engine needs one)"
    if importlib.util.find_spec("transformer_engine") is None:
        return "transformer-engine is not installed (pip install '.[gpu]')"
    if cfg is None or mode not in ("fp8", "nvfp4"):
        return None
    from transformer_engine.common import recipe as te_r

    name, check = _RECIPES[_recipe_key(cfg, mode)]
    if not hasattr(te_r, name):
        return f"the installed transformer-engine has no {name} recipe (upgrade the gpu extra)"
    manager = _state_manager()
    fn = getattr(manager, check, None) if manager is not None else None
    if fn is None:
        return f"the installed transformer-engine cannot tell whether this GPU runs {name}"
    ok, reason = fn()
    return None if ok else f"this GPU cannot run {name}: {reason}"


def te_available() -> bool:
    """True when a CUDA device is visible and transformer-engine is importable."""
    return te_status() is None


_RECIPES = {  # our recipe -> (TE recipe class, FP8GlobalStateManager support check)
    "tensor": ("Float8CurrentScaling", "is_fp8_available"),
    "delayed": ("DelayedScaling", "is_fp8_available"),
    "block": ("Float8BlockScaling", "is_fp8_block_scaling_available"),
    "mxfp8": ("MXFP8BlockScaling", "is_mxfp8_available"),
    "row": ("(none: per-row scales)", "is_fp8_available"),
    "nvfp4": ("NVFP4BlockScaling", "is_nvfp4_available"),
}


def _recipe_key(cfg: PrecisionConfig, mode: str) -> str:
    if mode == "nvfp4":
        return "nvfp4"
    if cfg.fp8_granularity == "tensor" and cfg.fp8_scaling == "delayed":
        return "delayed"
    return cfg.fp8_granularity


def _state_manager():
    """TE's FP8GlobalStateManager (in `quantization` since TE 2.8, `fp8` before)."""
    import importlib

    for name in ("transformer_engine.pytorch.quantization", "transformer_engine.pytorch.fp8"):
        try:
            return importlib.import_module(name).FP8GlobalStateManager
        except (ImportError, AttributeError):
            continue
    return None


def te_recipe(cfg: PrecisionConfig, mode: str):
    """TE recipe object for `mode` (fp8 | nvfp4) under `cfg`'s granularity, scaling and gradient format."""
    reason = cfg.te_unsupported_reason(mode) if mode in ("fp8", "nvfp4") else None
    if reason:
        raise ValueError(reason)
    from transformer_engine.common import recipe as te_r

    if mode == "nvfp4":
        return te_r.NVFP4BlockScaling(
            disable_rht=cfg.hadamard == "off",
            disable_stochastic_rounding=not cfg.nvfp4_grad_stochastic,
            disable_2d_quantization=not cfg.nvfp4_weight_2d,
        )
    if mode != "fp8":
        raise ValueError(f"transformer-engine recipes exist for fp8 and nvfp4, not {mode!r}")
    fmt = te_r.Format.E4M3 if cfg.fp8_grad_format == "e4m3" else te_r.Format.HYBRID
    if cfg.fp8_granularity == "tensor" and cfg.fp8_scaling == "delayed":
        return te_r.DelayedScaling(
            margin=cfg.fp8_margin,
            fp8_format=fmt,
            amax_history_len=cfg.amax_history_len,
            amax_compute_algo=cfg.amax_compute_algo,
        )
    if cfg.fp8_granularity == "tensor":
        return te_r.Float8CurrentScaling(fp8_format=fmt)
    if cfg.fp8_granularity == "block":
        recipe = te_r.Float8BlockScaling(fp8_format=fmt)
        fp32_scales = te_r.QParams(power_2_scale=False, amax_epsilon=0.0)
        recipe.fp8_quant_fwd_inp = recipe.fp8_quant_fwd_weight = recipe.fp8_quant_bwd_grad = fp32_scales
        return recipe
    return te_r.MXFP8BlockScaling(fp8_format=fmt)  # mxfp8 (row was rejected above)


def te_alignment(cfg: PrecisionConfig, mode: str) -> int:
    """Rows per GEMM must be a multiple of this (TE 2.19 `get_align_size_for_quantization`)."""
    if mode == "nvfp4":
        return 128
    return 32 if cfg.fp8_granularity == "mxfp8" else 16


def te_autocast(recipe):
    """TE's quantisation context: `te.autocast(recipe=)` (TE >= 2.8) or `te.fp8_autocast(fp8_recipe=)`."""
    import transformer_engine.pytorch as te

    if hasattr(te, "autocast"):
        return te.autocast(enabled=True, recipe=recipe)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe)


class TELinearRunner:
    """y = x @ wᵀ through `te.Linear` for weights we own; one TE module per `key`.

    TE keeps per-module state only for delayed scaling (its amax histories), so callers pass one
    key per GEMM that needs its own history (per expert and site), and may share a key otherwise.
    The TE modules live outside the model's parameters and state_dict (their weight slot is empty
    between calls), so names, optimizer groups and checkpoints are unchanged; TE's own delayed-
    scaling history is therefore not checkpointed (the emulation's is).
    """

    def __init__(self, cfg: PrecisionConfig, mode: str) -> None:
        reason = te_status(cfg, mode)
        if reason:
            raise RuntimeError(f"precision backend te: {reason}")
        self.cfg, self.mode = cfg, mode
        self.recipe = te_recipe(cfg, mode)
        self.align = te_alignment(cfg, mode)
        self.layers: dict = {}

    def linear(self, key, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x (M, K) @ w (N, K)ᵀ in bf16 with TE's quantised GEMMs (forward and backward); x's dtype out."""
        import transformer_engine.pytorch as te

        _check_device(x, w)
        n_out, n_in = w.shape
        if n_out % 16 or n_in % 16:
            raise ValueError(f"transformer-engine fp8/nvfp4 GEMMs need dims divisible by 16, got weight {tuple(w.shape)}")
        layer = self.layers.get(key)
        if layer is None:
            layer = te.Linear(n_in, n_out, bias=False, params_dtype=torch.bfloat16, device=w.device)
            layer._parameters["weight"] = None  # our weight is put in for each call
            self.layers[key] = layer
        rows = x.shape[0]
        xb = x.to(torch.bfloat16)
        pad = (-rows) % self.align
        if pad:
            xb = torch.nn.functional.pad(xb, (0, 0, 0, pad))
        layer._parameters["weight"] = w.to(torch.bfloat16)  # autograd: grads flow back to our parameter
        try:
            with te_autocast(self.recipe):
                y = layer(xb)
        finally:
            layer._parameters["weight"] = None
        return y[:rows].to(x.dtype)


def _check_device(x: torch.Tensor, w: torch.Tensor) -> None:
    if not (x.is_cuda and w.is_cuda):
        raise RuntimeError(f"precision backend te needs CUDA tensors, got x on {x.device} and w on {w.device}")


def te_grouped_linear(runner: TELinearRunner, site, x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Grouped GEMM (`shared.kernels.grouped_mm` layout) as one TE linear per expert with tokens.

    x (A, K) sorted by expert, w (E, N, K); rows past sum(counts) (capacity drops) give zeros.
    Delayed scaling keeps one TE module (one amax history) per (site, expert), as TE's
    `GroupedLinear` keeps per-GEMM fp8 meta; other recipes share one module per site.
    """
    delayed = runner.cfg.fp8_scaling == "delayed" and runner.mode == "fp8"
    total = sum(counts)
    outs = []
    for e, chunk in enumerate(torch.split(x[:total], counts)):
        if len(chunk):
            outs.append(runner.linear((site, e) if delayed else site, chunk, w[e]))
    if total < x.shape[0] or not outs:
        outs.append(x.new_zeros(x.shape[0] - total, w.shape[1]))
    return torch.cat(outs)


def te_linear(x: torch.Tensor, weight: torch.Tensor, cfg: PrecisionConfig, mode: str) -> torch.Tensor:
    """y = x @ weightᵀ through a bias-free `te.Linear` on CUDA (a fresh runner: no delayed-scaling history)."""
    return TELinearRunner(cfg, mode).linear("te_linear", x, weight)
