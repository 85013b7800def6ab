"""fp8 experts on the GPU: bf16 vs ours (ragged fp8, cached weights) vs torchao's fp8, same shapes, same rows.

Why: the first H200 run measured native fp8 experts at 0.35–0.38× bf16's tokens/s. This step
times the rebuilt path against bf16 and against torchao's MoE fp8 GEMM (the named peer) at the
representative proxy-7b2a MoE layer shape — width 2560, 64 routed experts of 512, top-8, 8,192
tokens per micro-batch (65,536 expert rows) — each contender in its recipe's own precision:

* `bf16`: the model's grouped GEMM (`shared.kernels.grouped_mm`, backend grouped_mm) under bf16
  autocast over fp32 weights, as training runs it;
* `ours_fp8_row`: the per-row recipe on the ragged path (`shared.precision.ragged_fp8`: one
  `torch._scaled_grouped_mm` per GEMM, fused quantisers, weights quantised once per step);
* `ours_fp8_block`: the DeepSeek-V3 block recipe on the native backend (`torch._scaled_mm` per expert);
* `torchao_fp8_row`: `torchao.prototype.moe_training._to_fp8_rowwise_then_scaled_grouped_mm`
  (left out, with the reason, where torchao is not installed).

Two workloads, both forward + backward: one grouped GEMM (the gate/up projection, (E, 2F, D)) and
the experts' whole SwiGLU (gate/up GEMM, activation, down GEMM). A step is `--micro-batches`
micro-batches followed by an in-place weight update (what an optimizer step does to the version
counters), so the weight cache is exercised as in training. Contenders are interleaved, order
rotating; the figure is the median step, with the quartiles beside it. Memory per contender:
the experts' resident bytes (master weights, cached fp8 layouts), the bytes autograd holds for
the backward of one micro-batch (`memory_measure`), the allocator's peak over one micro-batch on
CUDA, and `memory.py`'s predicted bytes of low-precision weight copies for the recipe.

    python benchmarks/gpu_fp8_experts.py --out $OUT/fp8_experts.json     # on a GPU (gpu_checks.sh step)
    python benchmarks/gpu_fp8_experts.py --device cpu --quick            # CPU smoke: tiny shapes, reference kernel

Last line: JSON with `ms_per_step` and `speedup_vs_bf16` per workload and contender, `memory`,
`paths` (what each contender really ran), `errors`, `commit`, and ours' weight quantisations
beside the count an uncached path would make.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
REPO = _HERE.parent
sys.path.insert(0, str(REPO))

import argparse  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402

from benchmarks.gpu_common import device_facts, pick_device, time_interleaved, write_result  # noqa: E402

SHAPES = {"full": {"tokens": 8192, "d_model": 2560, "hidden": 512, "experts": 64, "top_k": 8},
          "quick": {"tokens": 64, "d_model": 64, "hidden": 32, "experts": 4, "top_k": 2}}


def routing_counts(tokens: int, experts: int, top_k: int, seed: int = 0) -> torch.Tensor:
    """Rows per expert of a mildly uneven top-k routing (what a trained router hands the experts)."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(tokens, experts, generator=gen) + 0.3 * torch.randn(experts, generator=gen)
    idx = scores.topk(top_k, dim=-1).indices
    return torch.bincount(idx.reshape(-1), minlength=experts)


def _recipe(granularity: str):
    from shared.config.precision import PrecisionConfig
    from shared.precision.recipe import gemm_recipe

    cfg = PrecisionConfig(expert="fp8", fp8_granularity=granularity)
    return cfg, gemm_recipe(cfg, "fp8")


def grouped_gemms(device: torch.device) -> tuple[dict, dict[str, str], dict[str, str]]:
    """{contender: gmm(x, w, counts)}, what each runs, and why any is left out."""
    from shared.kernels import grouped_mm
    from shared.precision.matmul import lp_grouped_linear
    from shared.precision.native import grouped_path, native_grouped_linear, native_status
    from shared.precision.ragged_fp8 import ragged_fp8_grouped_linear
    from shared.precision.torchao_backend import torchao_grouped_linear, torchao_status
    from shared.precision.weight_cache import WeightQuantCache

    row_cfg, row = _recipe("row")
    block_cfg, block = _recipe("block")
    gmms, paths, errors = {}, {}, {}
    gmms["bf16"] = lambda x, w, c: grouped_mm(x, w, c, "grouped_mm" if device.type == "cuda" else "auto")
    paths["bf16"] = "shared.kernels.grouped_mm under bf16 autocast"
    gmms["ours_fp8_row"] = _Counted(ragged_fp8_grouped_linear, row, WeightQuantCache())
    if device.type == "cuda":
        why = native_status(row_cfg, "fp8")  # probes the ragged path too: the model would take it only if it agrees
        paths["ours_fp8_row"] = f"ragged (native probe: {why or 'ok'}, model's grouped path: " \
                                f"{grouped_path(row, torch.empty(1, 16, 16, device=device))})"
        block_why = native_status(block_cfg, "fp8")
        if block_why:
            errors["ours_fp8_block"] = f"native block fp8 cannot run here: {block_why}"
        else:
            gmms["ours_fp8_block"] = lambda x, w, c: native_grouped_linear(x, w, c, block)
            paths["ours_fp8_block"] = "native torch._scaled_mm per expert (1x128 x 128x128)"
    else:
        paths["ours_fp8_row"] = "ragged, reference kernel (CPU: no torch._scaled_grouped_mm)"
        gmms["ours_fp8_block"] = lambda x, w, c: lp_grouped_linear(x, w, c, block)
        paths["ours_fp8_block"] = "emulation (CPU: native fp8 needs a GPU)"
    ao_why = torchao_status(row_cfg.model_copy(update={"backend": "torchao"}), "fp8")
    if ao_why:
        errors["torchao_fp8_row"] = ao_why
    else:
        gmms["torchao_fp8_row"] = torchao_grouped_linear
        paths["torchao_fp8_row"] = "torchao _to_fp8_rowwise_then_scaled_grouped_mm"
    return gmms, paths, errors


class _Counted:
    """Our ragged grouped GEMM with its weight cache, counting its calls: the cache's quantisations
    against twice the calls (forward and Dgrad layouts per call without a cache) shows the reuse."""

    def __init__(self, fn, recipe, cache) -> None:
        self.fn, self.recipe, self.cache, self.calls = fn, recipe, cache, 0

    def __call__(self, x, w, counts):
        self.calls += 1
        return self.fn(x, w, counts, self.recipe, self.cache, f"{w.shape[1]}x{w.shape[2]}")


def build_weights(shape: dict, device: torch.device, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    e, d, f = shape["experts"], shape["d_model"], shape["hidden"]
    return [torch.nn.Parameter((torch.randn(e, *s, generator=gen) * s[1] ** -0.5).to(device))
            for s in ((f, d), (f, d), (d, f))]


def workloads(gmm, weights, x, counts, dy_gate, dy_out):
    """{name: (forward of one micro-batch, the gradient its backward takes)} for one contender."""
    from shared.kernels.dispatch import expert_swiglu

    w1, w3, w2 = weights
    return {
        "grouped_gemm": (lambda: gmm(x, torch.cat([w1, w3], dim=1), counts), dy_gate),
        "expert_swiglu": (lambda: expert_swiglu(x, w1, w3, w2, counts, gmm=lambda a, w, c, _b: gmm(a, w, c)), dy_out),
    }


def fwd_bwd(job) -> None:
    forward, dy = job
    forward().backward(dy)


def run_step(job, weights, micro_batches: int, autocast: torch.autocast):
    def step(_round: int) -> None:
        with autocast:
            for _ in range(micro_batches):
                fwd_bwd(job)
        with torch.no_grad():
            for w in weights:
                w.grad = None
                w.mul_(1.0)  # in place, as an optimizer step: every cached fp8 copy is now stale
    return step


def memory_of(name, gmm, job, weights, device, autocast) -> dict:
    from shared.precision.memory import lowp_copy_bytes
    from shared.precision.memory_measure import cuda_peak_bytes, held_for_backward

    master = sum(w.numel() * w.element_size() for w in weights)
    n_params = sum(w.numel() for w in weights)
    with autocast:
        peak = cuda_peak_bytes(device, lambda: fwd_bwd(job))
        _, held = held_for_backward(job[0], exclude=weights)
    cache = getattr(gmm, "cache", None)
    mode, gran = ("bf16", "block") if name == "bf16" else ("fp8", "block" if "block" in name else "row")
    return {"master_bytes": master, "fp8_cache_bytes": cache.resident_bytes() if cache is not None else 0,
            "held_for_backward_bytes": held, "cuda_peak_added_bytes": peak,
            "predicted_lowp_copy_bytes": lowp_copy_bytes(mode, "fp32", gran, weights[0].shape[2]) * n_params}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes, few rounds (a smoke run)")
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    device = pick_device(args.device)
    shape = SHAPES["quick" if args.quick else "full"]
    rounds = 2 if args.quick else args.rounds
    micro = 2 if args.quick else args.micro_batches
    counts = routing_counts(shape["tokens"], shape["experts"], shape["top_k"]).to(device)
    rows, d, f = int(counts.sum()), shape["d_model"], shape["hidden"]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(rows, d, generator=gen).to(device=device, dtype=torch.bfloat16).requires_grad_()
    dy_gate = torch.randn(rows, 2 * f, generator=gen).to(device=device, dtype=torch.bfloat16)
    dy_out = torch.randn(rows, d, generator=gen).to(device=device, dtype=torch.bfloat16)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    gmms, paths, errors = grouped_gemms(device)
    weights = {name: build_weights(shape, device) for name in gmms}
    jobs = {name: workloads(gmm, weights[name], x, counts, dy_gate, dy_out) for name, gmm in gmms.items()}
    for name in list(jobs):  # one untimed micro-batch each: a contender that fails here is left out, saying why
        try:
            with autocast:
                for job in jobs[name].values():
                    fwd_bwd(job)
        except Exception as exc:  # noqa: BLE001 - recorded in the JSON, the others still measured
            errors[name] = f"{type(exc).__name__}: {str(exc)[:400]}"
            del jobs[name]
    if "bf16" not in jobs:
        raise SystemExit(f"the bf16 reference failed: {errors.get('bf16')}")
    ms, spread, speedup = {}, {}, {}
    for work in ("grouped_gemm", "expert_swiglu"):
        steps = {n: run_step(j[work], weights[n], micro, autocast) for n, j in jobs.items()}
        times = time_interleaved(steps, rounds, device, warmup=1 if args.quick else 2)
        ms[work] = {n: 1e3 * statistics.median(t) for n, t in times.items()}
        spread[work] = {n: [1e3 * q for q in statistics.quantiles(t, n=4, method="inclusive")] if len(t) > 1 else None
                        for n, t in times.items()}
        speedup[work] = {n: ms[work]["bf16"] / v for n, v in ms[work].items()}
    memory = {n: memory_of(n, gmms[n], jobs[n]["expert_swiglu"], weights[n], device, autocast) for n in jobs}
    result = {"benchmark": "fp8_experts", **device_facts(device), "shape": shape, "rows": rows,
              "counts": counts.tolist(), "micro_batches_per_step": micro, "rounds": rounds,
              "ms_per_step": ms, "ms_quartiles": spread, "speedup_vs_bf16": speedup, "memory": memory,
              "paths": paths, "errors": errors,
              "ours_weight_quantisations": gmms["ours_fp8_row"].cache.quantisations,
              "ours_grouped_gemm_calls": gmms["ours_fp8_row"].calls,
              "uncached_weight_quantisations": 2 * gmms["ours_fp8_row"].calls}
    for work in ms:
        print(work, {n: f"{v:.2f} ms ({speedup[work][n]:.2f}x bf16)" for n, v in ms[work].items()}, flush=True)
    write_result(result, args.out)


if __name__ == "__main__":
    main()
