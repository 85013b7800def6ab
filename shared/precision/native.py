"""fp8 GEMMs on Hopper (and Ada) tensor cores with PyTorch alone: `precision.backend: native`.

Why: transformer-engine is large, tied to CUDA builds and absent from plain CUDA images (such as
the H200 machines this project is tested on), while `torch._scaled_mm` ships with every CUDA
torch and runs fp8 e4m3/e5m2 GEMMs with per-tensor, per-row and (on sm90, cuBLAS ≥ 12.9)
DeepSeek-style 1×128 / 128×128 block scales. This backend runs the same recipes as the emulation
— same tiles, same scales, same rounding (`native_quant`), delayed scaling from the same amax
history — so the emulation stays its CPU reference and a test compares the two GEMM by GEMM.

A linear layer's three GEMMs (forward Y = X Wᵀ, Dgrad dX = dY W, Wgrad dW = dYᵀ X) each quantise
both operands along their own reduction dimension, as in `shared.precision.matmul`; operands whose
fp8 values do not depend on the direction (per-tensor scales, 128×128 weight blocks, delayed
scaling) are quantised once and reused by the backward. Batches of GEMMs (the routed experts,
with per-row scales (`fp8_granularity: row`) run on the ragged path (`ragged_fp8`): every expert's
rows in one 2-D operand, groups aligned to 16 rows, one `torch._scaled_grouped_mm` with offsets per
GEMM, fused quantisers and the weights' fp8 layouts cached once per optimizer step. Other recipes'
batches (zero-padded to one batch by `lp_grouped_linear`) run as one 3-D × 3-D
`torch._scaled_grouped_mm` call where the scales are per tensor, else one `torch._scaled_mm` per
expert. Dimensions are zero-padded to the kernels' alignment (16; K to 512
for 128×128 blocks, whose scale rows cuBLAS wants in groups of four), which changes no tile and no
scale. Outputs are bf16 on CUDA (as TE's), fp32 elsewhere.

nvfp4 and mxfp8 have no native path here (their block-scaled GEMMs need Blackwell; use `te`):
they stay emulated and `native_status` says so. `native_status` also runs a small probe GEMM
through every kernel the recipe needs and compares it with the emulation, so a torch build or a
GPU that cannot run a recipe is found when the model is built, not mid-training.
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.nn.functional as F

from shared.config.precision import PrecisionConfig
from shared.precision.delayed import DelayedScalingState, UpdateMode
from shared.precision.matmul import _LowPrecisionBmm, lp_grouped_linear, lp_linear
from shared.precision.native_quant import (
    TENSOR_SCALE_FORMS,
    Fp8Operand,
    quantize_fp8,
    quantize_fp8_delayed,
    row_scales,
    scale_layout,
    spec_kind,
)
from shared.precision.ragged_fp8 import ragged_fp8_grouped_linear, ragged_supports
from shared.precision.recipe import GemmRecipe, gemm_recipe
from shared.precision.weight_cache import WeightQuantCache

# (CUDA device, scale kind) -> whether the probe's `torch._scaled_grouped_mm` agreed with the emulation
_GROUPED_OK: dict[tuple[int, str], bool] = {}
# CUDA device -> whether the probe's ragged row-wise grouped GEMM (offsets form) agreed with the emulation
_RAGGED_OK: dict[int, bool] = {}
# Why a faster expert path was refused on a device, as the probe found it (logged once when found).
FALLBACK_REASONS: dict[tuple[int, str], str] = {}
log = logging.getLogger(__name__)
# CUDA device -> how per-tensor scales are passed to `torch._scaled_mm` there (the first of
# `TENSOR_SCALE_FORMS` the probe found working); the 0-dim form until a probe has run
_TENSOR_FORM: dict[int, str] = {}


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _pad_to(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    pr, pc = rows - t.shape[-2], cols - t.shape[-1]
    return F.pad(t, (0, pc, 0, pr)) if pr or pc else t


def fp8_bmm(a: Fp8Operand, b: Fp8Operand, out_dtype: torch.dtype) -> torch.Tensor:
    """(a · scale) @ (b · scale)ᵀ per batch element: a (B, M, K), b (B, N, K) -> (B, M, N)."""
    n_batch = a.data.shape[0]
    if n_batch > 1 and a.data.is_cuda and a.kind == b.kind and _GROUPED_OK.get((a.data.device.index or 0, a.kind)):
        return torch._scaled_grouped_mm(
            a.data, b.data.transpose(1, 2), row_scales(a), row_scales(b), out_dtype=out_dtype
        )
    form = tensor_scale_form(a.data.device)
    outs = [
        torch._scaled_mm(a.data[i], b.data[i].t(), scale_layout(a, i, False, form), scale_layout(b, i, True, form),
                         out_dtype=out_dtype)
        for i in range(n_batch)
    ]  # fmt: skip
    return torch.stack(outs)


def tensor_scale_form(device: torch.device) -> str:
    """How per-tensor scales go to `torch._scaled_mm` on `device` (see `TENSOR_SCALE_FORMS`)."""
    return _TENSOR_FORM.get(device.index or 0, "scalar") if device.type == "cuda" else "scalar"


def _quantize(t, spec, role: str, state: DelayedScalingState | None, mode: UpdateMode) -> Fp8Operand:
    if state is not None:
        return quantize_fp8_delayed(state, role, t, spec.fmt, mode)
    return quantize_fp8(t, spec)


class NativeFp8Bmm(torch.autograd.Function):
    """Y_b = X_b W_bᵀ for X (B, M, K), W (B, N, K) on fp8 GEMMs, quantised in all three GEMMs.

    The drop-in for the emulation's `_LowPrecisionBmm` (same arguments, same quantised values).
    """

    @staticmethod
    def forward(ctx, x, w, recipe: GemmRecipe, state: DelayedScalingState | None, mode: UpdateMode):
        r = recipe
        if r.mode != "fp8" or r.hadamard != "off":
            raise ValueError(f"native GEMMs run fp8 recipes without a Hadamard transform, got {r.mode}")
        m, k, n = x.shape[1], x.shape[2], w.shape[1]
        # 128×128 weight blocks: K (forward) and N (Dgrad) are reductions over those blocks
        w_align = 512 if spec_kind(r.w) == "128x128" else 16
        mp, kp, np_ = _align(max(m, 1), 16), _align(k, w_align), _align(n, w_align)
        xp, wp = _pad_to(x, mp, kp), _pad_to(w, np_, kp)
        xq = _quantize(xp, r.x, "x", state, mode)
        wq = _quantize(wp, r.w, "w", state, mode)
        out_dtype = torch.bfloat16 if x.is_cuda else torch.float32
        y = fp8_bmm(xq, wq, out_dtype)[:, :m, :n]
        ctx.reuse_x = state is not None or xq.kind == "tensor"
        ctx.reuse_w = state is not None or wq.kind in ("tensor", "128x128")
        ctx.fp8 = (xq if ctx.reuse_x else None, wq if ctx.reuse_w else None)
        ctx.save_for_backward(None if ctx.reuse_x else xp, None if ctx.reuse_w else wp)
        ctx.recipe, ctx.state, ctx.shape, ctx.padded, ctx.dtypes = r, state, (m, k, n), (mp, kp, np_), (x.dtype, w.dtype)
        ctx.out_dtype = out_dtype
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xp, wp = ctx.saved_tensors
        xq, wq = ctx.fp8
        r, state = ctx.recipe, ctx.state
        (m, k, n), (mp, _, np_) = ctx.shape, ctx.padded
        dyp = _pad_to(dy, mp, np_)
        dx = dw = None
        dyq = None
        if state is not None:  # one delayed scale for Dgrad and Wgrad, as the emulation
            dyq = quantize_fp8_delayed(state, "grad", dyp, r.grad.fmt, "train")
        if ctx.needs_input_grad[0]:  # dX = dY W: both along N
            if dyq is None:
                dyq = quantize_fp8(dyp, r.grad)
            w_t = wq.transposed() if ctx.reuse_w else quantize_fp8(wp.transpose(1, 2), r.w)
            dx = fp8_bmm(dyq, w_t, ctx.out_dtype)[:, :m, :k].to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:  # dW = dYᵀ X: both along the tokens
            if dyq is not None and dyq.kind == "tensor":
                dy_t = dyq.transposed()
            else:
                dy_t = quantize_fp8(dyp.transpose(1, 2), r.grad)
            x_t = xq.transposed() if ctx.reuse_x else quantize_fp8(xp.transpose(1, 2), r.x)
            dw = fp8_bmm(dy_t, x_t, ctx.out_dtype)[:, :n, :k].to(ctx.dtypes[1])
        return dx, dw, None, None, None


def _check_cuda(x: torch.Tensor, w: torch.Tensor) -> None:
    if not (x.is_cuda and w.is_cuda):
        raise RuntimeError(
            f"precision backend native runs fp8 GEMMs on a CUDA GPU, got x on {x.device} and w on {w.device}; "
            "use backend=auto (emulation off the GPU) or backend=emulate"
        )


def native_linear(x, w, recipe: GemmRecipe, state: DelayedScalingState | None = None) -> torch.Tensor:
    """`lp_linear` on fp8 tensor cores: x (..., K) @ w (N, K)ᵀ."""
    _check_cuda(x, w)
    return lp_linear(x, w, recipe, state, bmm=NativeFp8Bmm.apply)


def native_grouped_linear(
    x, w, counts, recipe: GemmRecipe, state: DelayedScalingState | None = None, cache: WeightQuantCache | None = None
):
    """`lp_grouped_linear` on fp8 tensor cores (rows of x sorted by expert, w (E, N, K)): the ragged
    path where the recipe is per-row and the probe passed (`grouped_path`), else padded batches."""
    _check_cuda(x, w)
    if grouped_path(recipe, w, state) == "ragged":
        return ragged_fp8_grouped_linear(x, w, counts, recipe, cache, site=f"{w.shape[1]}x{w.shape[2]}")
    return lp_grouped_linear(x, w, counts, recipe, state, bmm=NativeFp8Bmm.apply)


def grouped_path(recipe: GemmRecipe, w: torch.Tensor, state: DelayedScalingState | None = None) -> str:
    """How a native grouped GEMM of weight `w` runs: ragged (offsets, one call per GEMM) or padded."""
    if state is None and ragged_supports(recipe, w.shape[1], w.shape[2]) is None:
        if w.device.type != "cuda" or _RAGGED_OK.get(w.device.index or 0):
            return "ragged"
    return "padded"


def native_status(cfg: PrecisionConfig, mode: str) -> str | None:
    """Why `mode` under `cfg` cannot run on this machine's fp8 tensor cores (None when it can)."""
    reason = cfg.native_unsupported_reason(mode)
    if reason:
        return reason
    if not torch.cuda.is_available():
        return "no CUDA device is visible (native fp8 GEMMs need an sm89+ GPU)"
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    if (major, minor) < (8, 9):
        return f"{name} (sm{major}{minor}) has no fp8 tensor cores (native fp8 needs sm89 or newer)"
    if cfg.fp8_granularity == "block" and major != 9:
        return f"1×128 / 128×128 block scales run in torch._scaled_mm on Hopper (sm90) only; {name} is sm{major}{minor}"
    return _probe(cfg.fp8_granularity, cfg.fp8_grad_format, torch.cuda.current_device())


@functools.cache
def _probe(granularity: str, grad_format: str, device: int) -> str | None:
    """Run fwd + both backward GEMMs natively and emulated on small random operands; None if they
    agree. One GEMM per call must work; the batched `torch._scaled_grouped_mm` (per-row scales
    only) is used for expert batches only if it agrees too. Stochastic gradient rounding is our own
    rounding code, not a kernel, so the probe rounds to nearest (two random draws would differ)."""
    cfg = PrecisionConfig(expert="fp8", fp8_granularity=granularity, fp8_grad_format=grad_format, backend="emulate")
    recipe = gemm_recipe(cfg, "fp8")
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev = torch.device("cuda", device)
    operands = [tuple(torch.randn(b, rows, cols, device=dev, generator=gen) for rows, cols in ((96, 256), (384, 256), (96, 384)))
                for b in (1, 2)]
    kind = spec_kind(recipe.x)
    if kind == "tensor":
        refusals = []
        for form in TENSOR_SCALE_FORMS:
            _TENSOR_FORM[device] = form
            problem = _compare(recipe, operands)
            if not problem:
                break
            refusals.append(f"{form} scales: {problem}")
        else:
            del _TENSOR_FORM[device]
            return f"fp8 {granularity} on torch._scaled_mm: " + "; ".join(refusals)
    else:
        problem = _compare(recipe, operands)
        if problem:
            return f"fp8 {granularity} on torch._scaled_mm: {problem}"
    if kind in ("tensor", "row") and hasattr(torch, "_scaled_grouped_mm"):
        _GROUPED_OK[(device, kind)] = not note_fallback(
            device, "batched torch._scaled_grouped_mm", _compare(recipe, operands[1:]), "one torch._scaled_mm per expert")
    if ragged_supports(recipe, 256, 256) is None:
        _RAGGED_OK[device] = not note_fallback(
            device, "ragged fp8 grouped GEMM", _compare_ragged(recipe, dev, gen), "padded expert batches")
    return None


def note_fallback(device: int, path: str, problem: str, instead: str) -> bool:
    """Record and log why `path` was refused on `device` (`problem`, '' when it agreed with the
    emulation); returns whether it was refused. A slower path taken without a word would read as
    fp8 being slow rather than as one kernel refusing."""
    if not problem:
        return False
    FALLBACK_REASONS[(device, path)] = problem
    log.warning("fp8 on cuda:%d: the %s %s; using %s instead", device, path, problem, instead)
    return True


def _compare_ragged(recipe: GemmRecipe, dev: torch.device, gen: torch.Generator) -> str:
    """'' when the ragged grouped GEMM (uneven groups, an empty one, dropped rows) agrees with the emulation."""
    counts = [40, 0, 7, 77]
    x, w = torch.randn(sum(counts) + 5, 256, device=dev, generator=gen), torch.randn(4, 384, 256, device=dev, generator=gen)
    dy = torch.randn(x.shape[0], 384, device=dev, generator=gen)

    def run(fn):
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = fn(xx, ww)
        y.backward(dy)
        return y.detach().float(), xx.grad.float(), ww.grad.float()

    try:
        got = run(lambda xx, ww: ragged_fp8_grouped_linear(xx, ww, torch.tensor(counts, device=dev), recipe))
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return f"refused ({str(exc).splitlines()[0][:300]})"
    want = run(lambda xx, ww: lp_grouped_linear(xx, ww, counts, recipe))
    return _disagreement(got, want)


def _compare(recipe: GemmRecipe, operands) -> str:
    for x, w, dy in operands:
        try:
            got = _fwd_bwd(NativeFp8Bmm.apply, x, w, dy, recipe)
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            return f"refused ({str(exc).splitlines()[0][:300]})"
        bad = _disagreement(got, _fwd_bwd(_LowPrecisionBmm.apply, x, w, dy, recipe))
        if bad:
            return f"disagrees with the emulation ({bad})"
    return ""


def _fwd_bwd(bmm, x, w, dy, recipe):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = bmm(x, w, recipe, None, "train")
    y.backward(dy)
    return y.detach().float(), x.grad.float(), w.grad.float()


def _disagreement(got, want, rel: float = 2.0**-6) -> str:
    """'' when every output is within `rel` of the emulation's norm (bf16 output rounding and fp32
    accumulation order differ; the fp8 values are identical), else which one is off."""
    for name, g, r in zip(("forward", "dgrad", "wgrad"), got, want, strict=True):
        err = float((g - r).norm() / r.norm().clamp_min(1e-30))
        if not err <= rel:
            return f"{name} relative error {err:.2e} > {rel:.1e}"
    return ""
