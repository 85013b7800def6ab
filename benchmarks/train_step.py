"""Full training step (forward + backward + AdamW step), tokens/s: ours vs HF DeepseekV3 vs torchtitan.

The same DeepSeek-V3-shaped model (MLA attention, a dense first
layer, then MoE layers of shared + fine-grained routed SwiGLU experts, sigmoid top-k routing with
one group) is built three times, in one process:

* ours: `shared.model.MoETransformer` from `configs/tiny.yaml` with overrides that set the shape,
  `attention.pattern=[mla]` and the MLA ranks; its loss adds `aux["aux_loss"]` and its step ends
  with `update_router_biases()` (the aux-loss-free bias update is part of our training step).
  It runs three times, same weights: as it runs by default (each GEMM on the library the autotune
  measured fastest here, `shared.kernels.cpu_gemm`) and as `ours[mkl]`, every GEMM on MKL, the
  BLAS the peers run: the same-backend figure; and as `ours[plain-ce]`, the head and loss run as
  the peers run them (logits, then `F.cross_entropy`) instead of fused
  (`shared.kernels.linear_cross_entropy`, the trainer's path): how much of the ratio is that;
* Hugging Face transformers' `DeepseekV3ForCausalLM` (SDPA attention), timed with every experts
  implementation it offers (`config._experts_implementation` = `grouped_mm`, `eager`); the ratio
  is against the fastest;
* torchtitan's `DeepSeekV3Model` built from its nested `Config` dataclasses, with SDPA as inner
  attention (FlexAttention has no backward on CPU) and its grouped experts run in fp32 (it casts
  expert GEMM operands to bf16, which these CPUs only emulate).

All run fp32 on CPU with `torch.optim.AdamW` (same hyper-parameters, one parameter group) and the
same next-token cross-entropy; parameter counts are printed and must agree to 1%. Steps are
interleaved (one step of each system per round, rotating the order) so load on the shared machine
hits all systems alike; the figure is the median over rounds after warm-up. It prints the CPU
model, ISA flags and caps (`ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2` emulate an AVX2
machine), the MKL and oneDNN code paths loaded, and each system's GEMM calls per library (from
the libraries' verbose logs, one untimed step each).

    .venv/bin/python benchmarks/train_step.py             # d 256, 4 layers, 16 experts x 128, top-2, 8 x 256
    .venv/bin/python benchmarks/train_step.py --quick     # a small smoke run
    .venv/bin/python benchmarks/train_step.py --profile   # also print the top ops of one step of each

Last line: JSON with `ratio` (our tokens/s / HF's fastest), `ratio_same_backend` (`ours[mkl]` / HF's
fastest), `ratio_torchtitan`, `ratio_torchtitan_same_backend` and `ratio_plain_ce`, the machine line and the calls per
library; also written to `benchmarks/results/train_step.<native|avx2>.json` (not with `--quick`).
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
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from benchmarks.result_file import save_cpu_result  # noqa: E402
from benchmarks.torchtitan_peer import fp32_grouped_experts  # noqa: E402
from shared.kernels.blas_probe import print_blas_calls, print_machine_line  # noqa: E402
from shared.kernels.cpu_gemm import use_cpu_gemm  # noqa: E402

REPO = _HERE.parent
TINY = REPO / "configs" / "tiny.yaml"


@dataclass
class Shape:
    vocab: int
    d_model: int
    layers: int
    heads: int
    experts: int
    hidden: int
    top_k: int
    shared: int
    first_dense: int
    q_lora: int
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_dim: int
    seq: int
    batch: int


# muP's base model keeps the proxies' 4 heads at base width 64 (20 heads cannot split 64 dims)
MUP_BASE = "model.mup.base_shapes={n_heads: 4, n_kv_heads: 4}"


def build_ours(s: Shape) -> tuple[nn.Module, int]:
    """Our model from configs/tiny.yaml at the benchmark shape; returns it and the dense FFN width."""
    from shared.config import load_config
    from shared.model import MoETransformer

    cfg = load_config(TINY, [
        f"model.vocab_size={s.vocab}", f"model.d_model={s.d_model}", f"model.n_layers={s.layers}",
        f"model.n_heads={s.heads}", f"model.n_kv_heads={s.heads}", f"model.max_seq_len={s.seq}",
        f"model.first_k_dense={s.first_dense}",
        f"model.moe.n_routed_experts={s.experts}", f"model.moe.expert_hidden={s.hidden}",
        f"model.moe.top_k={s.top_k}", f"model.moe.n_shared_experts={s.shared}",
        "model.attention.pattern=[mla]",
        f"model.attention.mla.q_lora_rank={s.q_lora}", f"model.attention.mla.kv_lora_rank={s.kv_lora}",
        f"model.attention.mla.qk_nope_head_dim={s.qk_nope}", f"model.attention.mla.qk_rope_head_dim={s.qk_rope}",
        f"model.attention.mla.v_head_dim={s.v_dim}", MUP_BASE,
    ])
    torch.manual_seed(0)
    return MoETransformer(cfg.model), cfg.model.resolved_dense_hidden


def build_hf(s: Shape, dense_hidden: int, impl: str) -> nn.Module:
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(
        vocab_size=s.vocab, hidden_size=s.d_model, intermediate_size=dense_hidden, moe_intermediate_size=s.hidden,
        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.heads,
        n_shared_experts=s.shared, n_routed_experts=s.experts, num_experts_per_tok=s.top_k,
        first_k_dense_replace=s.first_dense, n_group=1, topk_group=1, norm_topk_prob=True,
        routed_scaling_factor=1.0, q_lora_rank=s.q_lora or None, kv_lora_rank=s.kv_lora,
        qk_nope_head_dim=s.qk_nope, qk_rope_head_dim=s.qk_rope, v_head_dim=s.v_dim,
        max_position_embeddings=s.seq, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        use_cache=False, tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    config._experts_implementation = impl
    torch.manual_seed(0)
    return DeepseekV3ForCausalLM(config).float()


def build_torchtitan(s: Shape, dense_hidden: int) -> nn.Module:
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.deepseek_v3 import DeepSeekV3Model, build_mla_moe_layers

    init = {"weight": lambda t: nn.init.trunc_normal_(t, std=0.02), "bias": nn.init.zeros_}
    norm_init = {"weight": nn.init.ones_}
    experts_init = {k: (lambda t: nn.init.trunc_normal_(t, std=0.02)) for k in ("w1_EFD", "w2_EDF", "w3_EFD")}
    layers = build_mla_moe_layers(
        n_layers=s.layers, n_dense_layers=s.first_dense, dim=s.d_model, n_heads=s.heads,
        q_lora_rank=s.q_lora, kv_lora_rank=s.kv_lora, qk_nope_head_dim=s.qk_nope, qk_rope_head_dim=s.qk_rope,
        v_head_dim=s.v_dim, mscale=1.0, dense_hidden_dim=dense_hidden, moe_hidden_dim=s.hidden,
        num_experts=s.experts, num_shared_experts=s.shared, router_top_k=s.top_k, router_score_func="sigmoid",
        router_route_scale=1.0, router_route_norm=True, attn_backend="flex", moe_comm_backend="standard",
        non_blocking_capacity_factor=None, linear_init=init, norm_init=norm_init,
        depth_init=lambda _layer: init, depth_experts_init=lambda _layer: experts_init,
        rope=ComplexRoPE.Config(dim=s.qk_rope, max_seq_len=s.seq, theta=10000.0, scaling="none"),
    )
    # Its router runs under `torch.autocast(dtype=float32)`, which CPU autocast rejects (and skips) with a
    # warning per call; the result is the same fp32 routing, so silence only that message.
    warnings.filterwarnings("ignore", message="In CPU autocast, but the target dtype is not supported")
    fp32_experts = fp32_grouped_experts()
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
        if layer.moe is not None:
            old = layer.moe.routed_experts.inner_experts
            layer.moe.routed_experts.inner_experts = fp32_experts.Config(
                dim=old.dim, hidden_dim=old.hidden_dim, num_experts=old.num_experts, param_init=old.param_init,
            )
    config = DeepSeekV3Model.Config(
        vocab_size=s.vocab, dim=s.d_model,
        tok_embeddings=Embedding.Config(num_embeddings=s.vocab, embedding_dim=s.d_model,
                                        param_init={"weight": nn.init.normal_}),
        norm=RMSNorm.Config(normalized_shape=s.d_model, param_init=norm_init),
        lm_head=Linear.Config(in_features=s.d_model, out_features=s.vocab, param_init=init),
        layers=layers, mtp_layers=[],
    )
    torch.manual_seed(0)
    model = config.build()
    model.init_states()
    return model


def plain_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def make_step(model: nn.Module, forward: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]],
              after_step: Callable[[], None] | None = None, fused: bool | None = None) -> Callable[[torch.Tensor], float]:
    """One training step: next-token CE (+ the model's aux loss), backward, AdamW step.

    `forward(inputs, targets)` returns (mean next-token CE, aux loss or None): the peers compute the
    CE from their logits with `F.cross_entropy`; ours computes it as its trainer does. `fused`:
    AdamW's fused kernel (None: torch's default, foreach). The three phases run in
    `record_function` ranges (`forward`, `backward`, `optimizer`) that a profiler attributes.
    """
    from torch.autograd.profiler import record_function

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused)

    def step(tokens_BT1: torch.Tensor) -> float:
        inputs, targets = tokens_BT1[:, :-1], tokens_BT1[:, 1:]
        with record_function("forward"):
            loss, aux = forward(inputs, targets)
            if aux is not None:
                loss = loss + aux
        opt.zero_grad(set_to_none=True)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            if after_step is not None:
                after_step()
        return loss.item()

    return step


def _ours_system(s: Shape, cpu_gemm: str, fused_ce: bool = True) -> tuple[nn.Module, Callable[[torch.Tensor], float], int]:
    ours, dense_hidden = build_ours(s)

    def ours_fwd(x, y):
        if fused_ce:  # the trainer's step: head and loss fused, no logits tensor
            _, aux = ours(x, y)
            return aux["lm_loss"], aux["aux_loss"]
        logits, aux = ours(x)
        return plain_ce(logits, y), aux["aux_loss"]

    step = make_step(ours, ours_fwd, ours.update_router_biases)

    def step_with(tokens: torch.Tensor) -> float:
        with use_cpu_gemm(cpu_gemm):
            return step(tokens)

    return ours, step_with, dense_hidden


def systems(s: Shape, hf_impls: list[str]) -> dict[str, tuple[nn.Module, Callable[[torch.Tensor], float]]]:
    ours, ours_step, dense_hidden = _ours_system(s, "auto")
    same_backend, same_backend_step, _ = _ours_system(s, "mkl")
    unfused_loss, unfused_loss_step, _ = _ours_system(s, "auto", fused_ce=False)
    out = {"ours": (ours, ours_step), "ours[mkl]": (same_backend, same_backend_step),
           "ours[plain-ce]": (unfused_loss, unfused_loss_step)}
    for impl in hf_impls:
        hf = build_hf(s, dense_hidden, impl)
        out[f"hf[{impl}]"] = (hf, make_step(hf, lambda x, y, m=hf: (plain_ce(m(input_ids=x).logits, y), None)))
    try:
        tt = build_torchtitan(s, dense_hidden)
    except ImportError as exc:
        print(f"torchtitan not installed ({exc}); `pip install -e '.[bench]'` to compare", flush=True)
    else:
        out["torchtitan"] = (tt, make_step(tt, lambda x, y: (plain_ce(tt(x), y), None)))
    return out


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_same_size(built: dict[str, tuple[nn.Module, Callable]]) -> dict[str, int]:
    """Parameter counts must agree to 1% (ours adds one bungee scalar per MoE layer)."""
    counts = {name: n_params(m) for name, (m, _) in built.items()}
    ref = counts["ours"]
    for name, n in counts.items():
        print(f"{name}: {n:,} parameters", flush=True)
        if abs(n - ref) > 0.01 * ref:
            raise SystemExit(f"{name} has {n:,} parameters vs ours {ref:,} (> 1% apart): not the same configuration")
    return counts


def time_steps(built, s: Shape, warmup: int, rounds: int) -> dict[str, list[float]]:
    """Wall seconds of each timed step of each system, interleaved round by round (order rotates)."""
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=gen) for _ in range(4)]
    names = list(built)
    for name in names:
        for i in range(warmup):
            loss = built[name][1](batches[i % len(batches)])
        if not torch.isfinite(torch.tensor(loss)):
            raise SystemExit(f"{name}: non-finite loss {loss} during warm-up")
        print(f"{name}: warm-up done, loss {loss:.3f}", flush=True)
    times: dict[str, list[float]] = {n: [] for n in names}
    try:
        from tqdm import tqdm
        it = tqdm(range(rounds), desc="rounds", file=sys.stderr)
    except ImportError:
        it = range(rounds)
    for r in it:
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            built[name][1](batches[r % len(batches)])
            times[name].append(time.perf_counter() - t0)
    return times


def paired_ratios(times: dict[str, list[float]], ours: str, peer: str) -> dict:
    """Per-round speed ratio ours/peer (peer's step time over ours, same round) with its median and quartiles.

    Load from other jobs comes and goes over seconds; two steps of one round see nearly the same
    load, so the per-round ratio cancels most of it, and its quartiles show what is left.
    """
    rounds = [t_peer / t_ours for t_ours, t_peer in zip(times[ours], times[peer], strict=True)]
    if len(rounds) < 2:
        return {"rounds": rounds, "median": rounds[0], "q1": rounds[0], "q3": rounds[0]}
    q1, _, q3 = statistics.quantiles(rounds, n=4)
    return {"rounds": rounds, "median": statistics.median(rounds), "q1": q1, "q3": q3}


def profile(built, s: Shape, top: int) -> None:
    """Print the top ops by self CPU time of one step of each system (after warm-up)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    tokens = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=torch.Generator().manual_seed(9))
    for name, (_, step) in built.items():
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            step(tokens)
        print(f"\n=== profile: {name} (one step) ===")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, few steps (smoke test)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--experts", type=int, default=16)
    p.add_argument("--hidden", type=int, default=128, help="routed expert width (moe_intermediate_size)")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--shared", type=int, default=1)
    p.add_argument("--first-dense", type=int, default=1, help="leading dense layers (first_k_dense_replace)")
    p.add_argument("--q-lora", type=int, default=128)
    p.add_argument("--kv-lora", type=int, default=64)
    p.add_argument("--qk-nope", type=int, default=32)
    p.add_argument("--qk-rope", type=int, default=16)
    p.add_argument("--v-dim", type=int, default=32)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15, help="timed steps per system (median reported)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--profile", action="store_true", help="print torch.profiler's top ops of one step of each")
    p.add_argument("--out", type=Path, default=None,
                   help="result JSON (default: benchmarks/results/train_step.<native|avx2>[.t<threads>].json; none with --quick)")
    args = p.parse_args()
    if args.quick:
        args.vocab, args.d_model, args.layers, args.heads, args.experts, args.hidden = 512, 64, 2, 2, 4, 32
        args.q_lora, args.kv_lora, args.qk_nope, args.qk_rope, args.v_dim = 32, 16, 16, 8, 16
        args.seq, args.batch, args.warmup, args.rounds = 32, 2, 1, 2
    # Pin the thread count even at torch's default: setting it also turns MKL's dynamic thread
    # adjustment off (MKL_VERBOSE `Dyn:0`), under which a loaded machine slowed MKL's transposed-
    # operand GEMMs up to 20× (0.37 → 6.6–7.9 ms at 128×2048×256); every contender runs under it.
    torch.set_num_threads(args.threads or torch.get_num_threads())
    s = Shape(vocab=args.vocab, d_model=args.d_model, layers=args.layers, heads=args.heads, experts=args.experts,
              hidden=args.hidden, top_k=args.top_k, shared=args.shared, first_dense=args.first_dense,
              q_lora=args.q_lora, kv_lora=args.kv_lora, qk_nope=args.qk_nope, qk_rope=args.qk_rope,
              v_dim=args.v_dim, seq=args.seq, batch=args.batch)
    machine = print_machine_line()
    built = systems(s, ["grouped_mm", "eager"])
    counts = check_same_size(built)
    probe = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=torch.Generator().manual_seed(7))
    for _, step in built.values():
        step(probe)  # first steps: the GEMM autotune measures its new shape classes here, uncounted
    # (ours runs MLA's attention as batched GEMMs, `shared.kernels.causal_attention`; SDPA's CPU
    # flash kernel, where it runs, calls MKL SGEMM per tile, thousands a step)
    calls = print_blas_calls({name: (lambda step=step: step(probe)) for name, (_, step) in built.items()})
    times = time_steps(built, s, args.warmup, args.rounds)
    tokens = s.batch * s.seq
    # The median step is the headline; the fastest step is printed too because load from other jobs on
    # a shared machine only ever adds time, so the minimum is the less noisy estimate of the code's speed.
    tps = {n: tokens / statistics.median(v) for n, v in times.items()}
    tps_best = {n: tokens / min(v) for n, v in times.items()}
    for n, v in tps.items():
        print(f"{n}: median {tokens / v * 1e3:.1f} ms/step, {v:,.0f} tokens/s (fastest step {tps_best[n]:,.0f})",
              flush=True)
    best_hf = max((n for n in tps if n.startswith("hf[")), key=tps.get)
    best_hf_min = max((n for n in tps_best if n.startswith("hf[")), key=tps_best.get)
    has_tt = "torchtitan" in tps
    result = {
        "shape": vars(s), "threads": torch.get_num_threads(), "rounds": args.rounds, "params": counts,
        "tokens_per_s": tps, "tokens_per_s_fastest_step": tps_best, "hf_fastest": best_hf,
        "ratio": tps["ours"] / tps[best_hf],
        "ratio_same_backend": tps["ours[mkl]"] / tps[best_hf],
        "ratio_torchtitan": tps["ours"] / tps["torchtitan"] if has_tt else None,
        "ratio_torchtitan_same_backend": tps["ours[mkl]"] / tps["torchtitan"] if has_tt else None,
        "ratio_plain_ce": tps["ours[plain-ce]"] / tps[best_hf],
        "ratio_fastest_step": tps_best["ours"] / tps_best[best_hf_min],
        "ratio_torchtitan_fastest_step": tps_best["ours"] / tps_best["torchtitan"] if has_tt else None,
        # the same comparison round by round (one step of each system per round, back to back): the
        # spread of these says how far one run's headline can be trusted on this machine today
        "ratio_by_round": paired_ratios(times, "ours", best_hf),
        "ratio_torchtitan_by_round": paired_ratios(times, "ours", "torchtitan") if has_tt else None,
        "machine": machine, "blas_calls": calls, "load_average": os.getloadavg(),
    }
    q = result["ratio_by_round"]
    print(f"ours vs {best_hf} round by round: median {q['median']:.3f}, quartiles {q['q1']:.3f}-{q['q3']:.3f} "
          f"over {len(q['rounds'])} rounds", flush=True)
    tt = "n/a" if not has_tt else f"{result['ratio_torchtitan']:.2f}x ({result['ratio_torchtitan_same_backend']:.2f}x)"
    print(f"ours vs HF fastest ({best_hf}): {result['ratio']:.2f}x best backend, {result['ratio_same_backend']:.2f}x "
          f"same backend (MKL); ours vs torchtitan: {tt} (medians)", flush=True)
    if args.profile:
        profile(built, s, top=15)
    save_cpu_result("train_step", args.out, args.quick, result, threads=args.threads)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
