"""transformer-engine on CUDA: the hardware fp8 / nvfp4 GEMMs that the emulation stands in for.

`te_recipe` maps a `PrecisionConfig` to TE's recipe objects (`Float8CurrentScaling` for
per-tensor, `Float8BlockScaling` for DeepSeek-style 1×128 / 128×128 blocks, `MXFP8BlockScaling`,
`NVFP4BlockScaling`); `te_linear` runs one linear layer through `te.Linear` under TE's autocast
with a given weight. It needs a CUDA device and the `gpu` extra (TE does not build without CUDA,
DEPENDENCY-NOTES); the `gpu` tests check it against `lp_linear` on the same inputs. Per-row fp8
scaling has no TE recipe and stays emulated.
"""

from __future__ import annotations

import importlib.util

import torch

from shared.config.precision import PrecisionConfig


def te_available() -> bool:
    """True when a CUDA device is visible and transformer-engine is importable."""
    return torch.cuda.is_available() and importlib.util.find_spec("transformer_engine") is not None


def te_recipe(cfg: PrecisionConfig, mode: str):
    """TE recipe object for `mode` (fp8 | nvfp4) under `cfg`'s granularity and gradient format."""
    from transformer_engine.common import recipe as te_r

    if mode == "nvfp4":
        return te_r.NVFP4BlockScaling()
    if mode != "fp8":
        raise ValueError(f"transformer-engine recipes exist for fp8 and nvfp4, not {mode!r}")
    fmt = te_r.Format.E4M3 if cfg.fp8_grad_format == "e4m3" else te_r.Format.HYBRID
    if cfg.fp8_granularity == "tensor":
        return te_r.Float8CurrentScaling(fp8_format=fmt)
    if cfg.fp8_granularity == "block":
        return te_r.Float8BlockScaling(fp8_format=fmt)
    if cfg.fp8_granularity == "mxfp8":
        return te_r.MXFP8BlockScaling(fp8_format=fmt)
    raise ValueError("precision.fp8_granularity=row has no transformer-engine recipe; it runs emulated only")


def _autocast(recipe):
    import transformer_engine.pytorch as te

    if hasattr(te, "autocast"):  # TE >= 2.8
        return te.autocast(enabled=True, recipe=recipe)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def te_linear(x: torch.Tensor, weight: torch.Tensor, cfg: PrecisionConfig, mode: str) -> torch.Tensor:
    """y = x @ weightᵀ through a bias-free `te.Linear` holding a copy of `weight` (N, K), on CUDA."""
    if not te_available():
        raise RuntimeError("te_linear needs a CUDA device and transformer-engine (pip install '.[gpu]')")
    import transformer_engine.pytorch as te

    out_features, in_features = weight.shape
    layer = te.Linear(in_features, out_features, bias=False, params_dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        layer.weight.copy_(weight)
    with _autocast(te_recipe(cfg, mode)):
        return layer(x)
