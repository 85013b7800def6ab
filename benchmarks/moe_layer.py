"""One MoE layer, forward + backward: ours vs Hugging Face `DeepseekV3MoE` and torchtitan's `MoE`.

All three get the *same weights* (ours copied into theirs); HF's outputs must agree with ours to
1e-4 before anything is timed. HF is timed with every experts implementation it offers
(`config._experts_implementation` = `grouped_mm`, `eager`) and we compare against the fastest.
torchtitan's experts cast to bf16 before `torch._grouped_mm`, which these CPUs only emulate, so
they run here as in `benchmarks/train_step.py`: the same grouped GEMMs in fp32 without the casts
(`benchmarks/torchtitan_peer.py`); torchtitan then must agree with ours to 1e-4, as HF must. All
contenders get the same input batch and are timed interleaved, round by round.

    .venv/bin/python benchmarks/moe_layer.py            # d 512, 64 experts × 128, top-8, 4096 tokens
    .venv/bin/python benchmarks/moe_layer.py --quick    # a small smoke run
    .venv/bin/python benchmarks/moe_layer.py --gpu      # proxy-7b2a layer shape, bf16, our backends

Ours runs as `auto` picks on CPU: at the default shape the routed path fused per expert
(`shared.kernels.fused_experts`), experts in concurrent single-threaded groups where that pays
(`shared.kernels.expert_threads`), each fp32 GEMM on the library the autotune measured fastest
for its shape class here (`shared.kernels.cpu_gemm`: MKL, as torch's `mm`, or oneDNN). To show
what each step buys, it is also timed with MKL for every GEMM, the BLAS the peers run
(`ours_mkl`: the same-backend figure), with the experts one after another (`ours_serial`), and
unfused with MKL (`ours_unfused`: whole-tensor permute, grouped GEMMs, combine).

It prints the CPU model, ISA flags and caps (`ONEDNN_MAX_CPU_ISA`, `MKL_ENABLE_INSTRUCTIONS` emulate
an AVX2 machine on an AVX-512 one), the MKL and oneDNN code paths loaded, and for each contender
the GEMM calls it made per library (from the libraries' verbose logs, one untimed run each).

Last line: JSON with `ratio` (our speed / HF's fastest), `ratio_same_backend` (ours on MKL only /
HF's fastest), `ratio_serial`, `ratio_unfused`, `ratio_torchtitan` (ours / torchtitan) and
`ratio_torchtitan_same_backend`, the machine line and the calls per library; also written to
`benchmarks/results/moe_layer.<native|avx2>.json` (not with `--quick`).
"""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/ holds a tokenize.py that would shadow the standard library's `tokenize` (which torch
# imports); run with the repo root on the path instead of this folder.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import torch  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from benchmarks.torchtitan_peer import fp32_grouped_experts  # noqa: E402
from shared.config.model import MoEConfig  # noqa: E402
from shared.kernels import grouped_mm  # noqa: E402
from shared.kernels.blas_probe import print_blas_calls, print_machine_line  # noqa: E402
from shared.kernels.cpu_gemm import cpu_gemm_setting, use_cpu_gemm  # noqa: E402
from shared.kernels.dispatch import expert_path  # noqa: E402
from shared.kernels.expert_threads import use_expert_threads  # noqa: E402
from shared.model.moe import MoELayer  # noqa: E402


def build_ours(d: int, experts: int, hidden: int, top_k: int, shared: int, backend: str) -> MoELayer:
    cfg = MoEConfig(
        n_routed_experts=experts, n_shared_experts=shared, expert_hidden=hidden, top_k=top_k,
        score_func="sigmoid", norm_topk_prob=True, route_scale=1.0, bungee=False, dispatch_backend=backend,
        balance={"seq_aux_alpha": 0.0},
    )
    torch.manual_seed(0)
    return MoELayer(d, cfg)


def build_hf(ours: MoELayer, d: int, impl: str):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    c = ours.cfg
    config = DeepseekV3Config(
        hidden_size=d, moe_intermediate_size=c.expert_hidden, n_routed_experts=c.n_routed_experts,
        num_experts_per_tok=c.top_k, n_shared_experts=c.n_shared_experts, n_group=1, topk_group=1,
        norm_topk_prob=True, routed_scaling_factor=c.route_scale, hidden_act="silu",
    )
    config._experts_implementation = impl
    hf = DeepseekV3MoE(config)
    with torch.no_grad():
        hf.gate.weight.copy_(ours.router.weight_ED)
        hf.experts.gate_up_proj.copy_(torch.cat([ours.experts.w1_EFD, ours.experts.w3_EFD], dim=1))
        hf.experts.down_proj.copy_(ours.experts.w2_EDF)
        hf.shared_experts.gate_proj.weight.copy_(ours.shared.w1.weight)
        hf.shared_experts.up_proj.weight.copy_(ours.shared.w3.weight)
        hf.shared_experts.down_proj.weight.copy_(ours.shared.w2.weight)
    return hf


def build_torchtitan(ours: MoELayer, d: int):
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import MoE, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

    fp32_experts = fp32_grouped_experts()
    c = ours.cfg
    E, F, K, S = c.n_routed_experts, c.expert_hidden, c.top_k, c.n_shared_experts
    lin = lambda i, o: Linear.Config(in_features=i, out_features=o)  # noqa: E731
    config = MoE.Config(
        num_experts=E,
        routed_experts=RoutedExperts.Config(
            inner_experts=fp32_experts.Config(dim=d, hidden_dim=F, num_experts=E),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=E, top_k=K),
        ),
        router=TokenChoiceTopKRouter.Config(num_experts=E, gate=lin(d, E), top_k=K, score_func="sigmoid",
                                            route_norm=True, route_scale=c.route_scale),
        load_balance_coeff=1e-3,
        shared_experts=FeedForward.Config(w1=lin(d, F * S), w2=lin(F * S, d), w3=lin(d, F * S)),
    )
    tt = config.build()
    with torch.no_grad():
        tt.router.gate.weight.copy_(ours.router.weight_ED)
        inner = tt.routed_experts.inner_experts
        inner.w1_EFD.copy_(ours.experts.w1_EFD)
        inner.w3_EFD.copy_(ours.experts.w3_EFD)
        inner.w2_EDF.copy_(ours.experts.w2_EDF)
        for name in ("w1", "w2", "w3"):
            getattr(tt.shared_experts, name).weight.copy_(getattr(ours.shared, name).weight)
        tt.expert_bias_E.zero_()
        tt.tokens_per_expert_E.zero_()
    return tt


def fwd_bwd(layer, x: torch.Tensor, g: torch.Tensor, ours: bool, cpu_gemm: str = "auto",
            expert_threads: str = "auto") -> Callable[[], None]:
    """One forward + backward of `layer` on x with output gradient g, gradients cleared first.

    `cpu_gemm` is the library policy of our CPU GEMMs meanwhile (`shared.kernels.cpu_gemm`),
    `expert_threads` that of our concurrent experts (`shared.kernels.expert_threads`).
    """
    params = list(layer.parameters())

    def run() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        with use_cpu_gemm(cpu_gemm), use_expert_threads(expert_threads):
            out = layer(x)
            (out[0] if ours else out).backward(g)
        if x.is_cuda:
            torch.cuda.synchronize()

    return run


def time_interleaved(contenders: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Median seconds of each contender over `repeats` rounds, after one warm-up round.

    Each round runs every contender once, so a slow spell on a shared machine slows all of them
    alike instead of whichever happened to be timing then; the ratios are what stays steady.
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(repeats + 1):
        for name, run in contenders.items():
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            if i:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _check_close(name: str, layer, x: torch.Tensor, ref: torch.Tensor, tol: float, note: str = "") -> None:
    with torch.no_grad():
        diff = (layer(x) - ref).abs().max().item()
    if diff > tol:
        raise SystemExit(f"{name} output differs from ours by {diff:.2e} (> {tol:g}); not timing a different function")
    print(f"{name}: max |Δ| vs ours {diff:.1e}{note}", flush=True)


def cpu_bench(args) -> dict:
    # Pin the thread count even at torch's default: setting it also turns MKL's dynamic thread
    # adjustment off (MKL_VERBOSE `Dyn:0`), under which a loaded machine slowed MKL's transposed-
    # operand GEMMs up to 20× (0.37 → 6.6–7.9 ms at 128×2048×256); every contender runs under it.
    torch.set_num_threads(args.threads or torch.get_num_threads())
    machine = print_machine_line()
    shape = (args.d_model, args.experts, args.hidden, args.top_k, args.shared)
    ours = build_ours(*shape, "auto")
    unfused = build_ours(*shape, "loop")  # same seed, same weights: the layer before fusion and oneDNN
    x = torch.randn(1, args.tokens, args.d_model, generator=torch.Generator().manual_seed(1), requires_grad=True)
    g = torch.randn(1, args.tokens, args.d_model, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = ours(x)[0]
        torch.testing.assert_close(unfused(x)[0], ref, atol=1e-5, rtol=1e-5)
    path = expert_path("auto", x[0], args.tokens * args.top_k, ours.experts.w1_EFD, grouped_mm)
    gemm = cpu_gemm_setting()
    contenders = {"ours": fwd_bwd(ours, x, g, True), "ours_mkl": fwd_bwd(ours, x, g, True, "mkl"),
                  "ours_serial": fwd_bwd(ours, x, g, True, expert_threads="off"),
                  "ours_unfused": fwd_bwd(unfused, x, g, True, "mkl")}
    for impl in ("grouped_mm", "eager"):
        hf = build_hf(ours, args.d_model, impl)
        _check_close(f"hf[{impl}]", hf, x, ref, 1e-4)
        contenders[f"hf_{impl}"] = fwd_bwd(hf, x, g, False)
    try:
        tt = build_torchtitan(ours, args.d_model)
    except ImportError as exc:
        print(f"torchtitan not installed ({exc}); `pip install -e '.[bench]'` to compare", flush=True)
    else:
        _check_close("torchtitan[fp32 grouped_mm, no bf16 casts]", tt, x, ref, 1e-4)
        tt.tokens_per_expert_E.zero_()
        contenders["torchtitan"] = fwd_bwd(tt, x, g, False)
    for run in contenders.values():
        run()  # first calls: the GEMM autotune measures its new shape classes here, untimed
    calls = print_blas_calls(contenders)
    t = time_interleaved(contenders, args.repeats)
    labels = {"ours": f"ours[auto -> {path}, {gemm} GEMMs]", "ours_mkl": f"ours[auto -> {path}, MKL GEMMs]",
              "ours_serial": f"ours[auto -> {path}, {gemm} GEMMs, experts serially]",
              "ours_unfused": "ours[loop, unfused, MKL GEMMs]"}
    for name, seconds in t.items():
        print(f"{labels.get(name, name)}: {seconds * 1e3:.1f} ms", flush=True)
    best_impl = min(("grouped_mm", "eager"), key=lambda k: t[f"hf_{k}"])
    hf_best = t[f"hf_{best_impl}"]
    tt = t.get("torchtitan")
    result: dict = {"tokens": args.tokens, "d_model": args.d_model, "experts": args.experts, "hidden": args.hidden,
                    "top_k": args.top_k, "threads": torch.get_num_threads(), "ours_path": path, "cpu_gemm": gemm,
                    **{f"{name}_s": seconds for name, seconds in t.items()}, "hf_fastest": best_impl,
                    "ratio": hf_best / t["ours"], "ratio_same_backend": hf_best / t["ours_mkl"],
                    "ratio_serial": hf_best / t["ours_serial"], "ratio_unfused": hf_best / t["ours_unfused"],
                    "ratio_torchtitan": tt / t["ours"] if tt else None,
                    "ratio_torchtitan_same_backend": tt / t["ours_mkl"] if tt else None,
                    "machine": machine, "blas_calls": calls, "load_average": os.getloadavg()}
    tt_text = "n/a" if tt is None else f"{result['ratio_torchtitan']:.2f}x ({result['ratio_torchtitan_same_backend']:.2f}x)"
    print(f"ours vs HF fastest ({best_impl}): {result['ratio']:.2f}x best backend, "
          f"{result['ratio_same_backend']:.2f}x same backend (MKL); vs torchtitan: {tt_text}", flush=True)
    return result


def gpu_bench(args) -> dict:
    """Tokens/s of one MoE layer fwd+bwd in bf16 at the proxy-7b2a layer shape, per backend."""
    if not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA device, and torch sees none")
    d, E, F, K, S = 2560, 64, 512, 8, 2
    T = args.tokens if args.tokens != 4096 else 16384
    result: dict = {"shape": f"d{d} E{E} F{F} top{K} shared{S} T{T} bf16"}
    x = torch.randn(1, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn_like(x)
    calls, errors = {}, {}
    for b in ("loop", "grouped_mm", "triton"):  # a backend this image cannot run is reported, not fatal
        try:
            calls[b] = fwd_bwd(build_ours(d, E, F, K, S, b).cuda().to(torch.bfloat16), x, g, True)
            calls[b]()
        except Exception as exc:  # noqa: BLE001 - recorded in the JSON with its reason
            errors[b] = f"{type(exc).__name__}: {exc}"[:500]
            calls.pop(b, None)
            print(f"ours[{b}] failed and is left out: {errors[b]}", flush=True)
    if "loop" not in calls:
        raise SystemExit(f"the loop backend, the reference, failed: {errors}")
    t = time_interleaved(calls, args.repeats)
    for backend in calls:
        result[f"{backend}_tokens_per_s"] = T / t[backend]
        print(f"ours[{backend}]: {t[backend] * 1e3:.2f} ms, {T / t[backend]:,.0f} tokens/s", flush=True)
    loop = result["loop_tokens_per_s"]
    result["ratio"] = result["grouped_mm_tokens_per_s"] / loop if "grouped_mm" in calls else None
    result["ratio_triton"] = result["triton_tokens_per_s"] / loop if "triton" in calls else None
    result["errors"] = errors
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few repeats (smoke test)")
    p.add_argument("--gpu", action="store_true", help="CUDA bf16 mode at the proxy-7b2a layer shape")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--shared", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/moe_layer.<native|avx2>[.t<threads>].json; none with --quick)")
    args = p.parse_args()
    if args.quick:
        args.tokens, args.d_model, args.experts, args.hidden, args.top_k, args.repeats = 256, 64, 8, 32, 2, 2
    result = gpu_bench(args) if args.gpu else cpu_bench(args)
    save_cpu_result("moe_layer", args.out, args.quick, result, threads=0 if args.gpu else args.threads,
                    tag="gpu" if args.gpu else None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
