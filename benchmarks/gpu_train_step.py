"""Training step on one GPU in bf16, tokens/s and MFU: ours vs HF transformers' DeepseekV3ForCausalLM.

The model has the 7B2A layer shape: width 2560, 20 heads, a dense first layer then MoE layers of
64 routed experts × 512 (top-8) + 2 shared, sequence 4096. `--shape representative` (the
default) takes 6 layers and a 32,768 vocabulary (1.61B total), so the output head is 15% of the
counted FLOPs and the figure tracks the transformer body as the full-depth recipes do; `--shape
proxy` is the earlier 4-layer, 131,072-vocabulary proxy (1.56B total), 52% of whose FLOPs are the
head. Attention is MLA in both (DeepseekV3 has no other), with DeepSeek's per-head widths (128
nope + 64 RoPE, values 128) and latent ranks 1024 / 512. The same configuration is built in one
process (`benchmarks/train_step.py`'s builders):

* ours: `shared.model.MoETransformer` with bf16 weights (as HF's), its aux loss and router-bias
  update in the step;
* ours[recipe]: the same model as the GPU recipes train it — fp32 weights (the master copy) under
  bf16 autocast — so the cost of mixed precision is visible;
* HF: `DeepseekV3ForCausalLM` with bf16 weights, SDPA attention, the experts implementations of
  `--hf-impls` (default `grouped_mm`, its fastest; `eager` too if asked); the ratio is against its
  fastest.

Each step is forward, next-token cross-entropy (+ aux), backward and `torch.optim.AdamW` (fused on
CUDA for every contender); the parameter counts must agree to 1%. Steps are interleaved round by
round (rotating order) and the median is reported, once with the routers as trained (`learned`)
and once with every router forced to a perfectly balanced assignment (`forced`: token t's k-th
expert is (t·K + k) mod E, the condition vendor figures are quoted under). `--profile DIR` saves a
torch.profiler trace of two ours[recipe] steps and its tables (benchmarks/gpu_profile.py). MFU
counts the training FLOPs once (see benchmarks/gpu_common.py). Memory: the peak allocated during
one step of each, and `moelab plan`'s figure for ours[recipe].

    python benchmarks/gpu_train_step.py --out benchmarks/results/gpu_train_step.json   # on a GPU
    python benchmarks/gpu_train_step.py --device cpu --quick                            # CPU smoke run

Last line: JSON with tokens_per_s (learned routing), tokens_per_s_by_routing, mfu, `ratio` (ours /
HF's fastest), `ratio_recipe`, `ratio_by_routing`, `head_flops_fraction` and the profile summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import gzip  # noqa: E402
import shutil  # noqa: E402

import torch  # noqa: E402

from benchmarks.gpu_common import (  # noqa: E402
    device_facts,
    first_runs,
    median,
    mfu,
    module_gib,
    pick_device,
    time_interleaved,
    write_result,
)
from benchmarks.train_step import Shape, build_hf, build_ours, check_same_size, make_step, plain_ce  # noqa: E402

PROXY = dict(vocab=131072, d_model=2560, layers=4, heads=20, experts=64, hidden=512, top_k=8, shared=2,
             first_dense=1, q_lora=1024, kv_lora=512, qk_nope=128, qk_rope=64, v_dim=128, seq=4096, batch=1)
# The representative proxy: the same layers, at a depth and vocabulary where the output head is at
# most ~20% of the counted training FLOPs (15.3% here, 1.61B total). At the recipe's 131k vocabulary
# the head stays above 20% until 18 layers (5.4B total), too big to hold beside its peers on one GPU.
REPRESENTATIVE = dict(PROXY, vocab=32768, layers=6)
QUICK = dict(vocab=512, d_model=64, layers=2, heads=2, experts=4, hidden=32, top_k=2, shared=1, first_dense=1,
             q_lora=32, kv_lora=16, qk_nope=16, qk_rope=8, v_dim=16, seq=32, batch=2)


def balanced_indices(tokens: int, top_k: int, n_experts: int, device: torch.device) -> torch.Tensor:
    """Token t's k-th expert is (t·K + k) mod E: every expert gets T·K/E assignments (E dividing T·K),
    each token K distinct experts (K ≤ E)."""
    return (torch.arange(tokens * top_k, device=device) % n_experts).view(tokens, top_k)


def force_balanced_routing(model: torch.nn.Module, on: bool = True) -> int:
    """Make every router of `model` (ours or HF DeepseekV3's) pick `balanced_indices` instead of its
    top-k, keeping its weights' computation (the chosen experts' scores); `on=False` undoes it.
    Vendor throughput figures use such forced balance; learned routing is what training runs.
    Returns the number of routers changed."""
    from shared.model.router import Router

    changed = 0
    for m in model.modules():
        if isinstance(m, Router):
            if on:
                m.select = lambda scores_TE, bias_E, _k=m.cfg.top_k: balanced_indices(
                    scores_TE.shape[0], _k, scores_TE.shape[1], scores_TE.device)
            else:
                m.__dict__.pop("select", None)
            changed += 1
        elif type(m).__name__ == "DeepseekV3TopkRouter":
            if on:
                m.forward = _hf_balanced_forward(m)
            else:
                m.__dict__.pop("forward", None)
            changed += 1
    return changed


def _hf_balanced_forward(router):
    def forward(hidden_states):
        h = hidden_states.view(-1, router.hidden_dim)
        logits = torch.nn.functional.linear(h.float(), router.weight.float())
        idx = balanced_indices(h.shape[0], router.top_k, router.num_experts, h.device)
        weights = logits.sigmoid().gather(1, idx)
        if router.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return logits, weights * router.routed_scaling_factor, idx
    return forward


def systems(s: Shape, device: torch.device, hf_impls: list[str]) -> tuple[dict, dict[str, str]]:
    """(name -> (model, step fn), name -> why it could not be built); ours in bf16 and in the recipe's
    fp32 + autocast, HF per experts impl (an impl the installed transformers lacks is reported)."""
    low = torch.bfloat16
    with device:  # built on the device: a 1.6B-parameter init on the host takes minutes
        ours, dense_hidden = build_ours(s)
        recipe, _ = build_ours(s)  # same seed, same initial weights
    ours = ours.to(dtype=low)

    def fwd(model, autocast: bool):
        def run(x, y):  # as the trainer runs it: the model computes its own loss from the targets
            with torch.autocast(device.type, dtype=low, enabled=autocast):
                _, aux = model(x, y)
            return aux["lm_loss"], aux["aux_loss"]
        return run

    fused = device.type == "cuda"  # every contender's AdamW fused, as the trainer's
    out = {"ours": (ours, make_step(ours, fwd(ours, False), ours.update_router_biases, fused=fused)),
           "ours[recipe]": (recipe, make_step(recipe, fwd(recipe, True), recipe.update_router_biases, fused=fused))}
    errors: dict[str, str] = {}
    for impl in hf_impls:
        try:
            with device:
                hf = build_hf(s, dense_hidden, impl).to(dtype=low)
        except Exception as exc:  # noqa: BLE001 - reported in the JSON; the other contenders still run
            errors[f"hf[{impl}]"] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        out[f"hf[{impl}]"] = (hf, make_step(hf, lambda x, y, m=hf: (plain_ce(m(input_ids=x).logits, y), None),
                                            fused=fused))
    return out, errors


def recipe_plan_gib(s: Shape):
    """(`moelab plan`'s total GiB for ours[recipe] at this shape on one GPU, its config); AdamW for all."""
    from benchmarks.train_step import MUP_BASE, TINY
    from shared.config import load_config
    from shared.plan.memory import GIB, plan_memory

    cfg = load_config(TINY, [
        f"model.vocab_size={s.vocab}", f"model.d_model={s.d_model}", f"model.n_layers={s.layers}",
        f"model.n_heads={s.heads}", f"model.n_kv_heads={s.heads}", f"model.max_seq_len={s.seq}",
        f"model.first_k_dense={s.first_dense}", f"model.moe.n_routed_experts={s.experts}",
        f"model.moe.expert_hidden={s.hidden}", f"model.moe.top_k={s.top_k}", f"model.moe.n_shared_experts={s.shared}",
        "model.attention.pattern=[mla]", f"model.attention.mla.q_lora_rank={s.q_lora}",
        f"model.attention.mla.kv_lora_rank={s.kv_lora}", f"model.attention.mla.qk_nope_head_dim={s.qk_nope}",
        f"model.attention.mla.qk_rope_head_dim={s.qk_rope}", f"model.attention.mla.v_head_dim={s.v_dim}",
        "train.dtype=bfloat16", f"train.seq_len={s.seq}", f"train.micro_batch_size={s.batch}", "optim.name=adamw",
        "optim.log_stats=false", MUP_BASE])
    return plan_memory(cfg).total / GIB, cfg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes, few rounds (a smoke run)")
    p.add_argument("--shape", default="representative", choices=["representative", "proxy"],
                   help="representative: head <= ~20%% of FLOPs (6 layers, vocab 32k); proxy: 4 layers, vocab 131k")
    p.add_argument("--hf-impls", default="grouped_mm", help="HF experts implementations, comma-separated")
    p.add_argument("--routing", default="learned,forced", help="learned and/or forced (balanced) routing, timed apart")
    p.add_argument("--profile", default=None, help="folder for a torch.profiler trace and tables of ours[recipe]")
    p.add_argument("--layers", type=int, default=None, help="override the proxy's depth")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 1 × 4096 tokens)")
    p.add_argument("--rounds", type=int, default=8, help="timed steps per system (median reported)")
    p.add_argument("--out", default=None, help="also write the JSON here (e.g. benchmarks/results/gpu_train_step.json)")
    args = p.parse_args()
    device = pick_device(args.device)
    shape = dict(QUICK if args.quick else REPRESENTATIVE if args.shape == "representative" else PROXY)
    if args.layers:
        shape["layers"] = args.layers
    if args.batch:
        shape["batch"] = args.batch
    s = Shape(**shape)
    rounds = 2 if args.quick else args.rounds
    built, errors = systems(s, device, [i for i in args.hf_impls.split(",") if i])
    counts = check_same_size(built)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=gen).to(device) for _ in range(4)]
    memory, failed = first_runs({n: (lambda st=step: st(batches[0])) for n, (_, step) in built.items()}, device,
                                resident={n: module_gib(model) for n, (model, _) in built.items()})
    errors.update(failed)
    built = {n: v for n, v in built.items() if n not in failed}
    if "ours" not in built or not any(n.startswith("hf[") for n in built):
        raise SystemExit(f"nothing to compare: {errors}")
    tokens = s.batch * s.seq
    routings = [r for r in args.routing.split(",") if r]
    tps_by_routing: dict[str, dict[str, float]] = {}
    for routing in routings:  # learned first: forcing balance changes the routers in place
        for model, _ in built.values():
            force_balanced_routing(model, on=routing == "forced")
        times = time_interleaved({n: (lambda r, st=step: st(batches[r % 4])) for n, (_, step) in built.items()},
                                 rounds, device, warmup=1)
        tps_by_routing[routing] = {n: tokens / median(t) for n, t in times.items()}
    for model, _ in built.values():
        force_balanced_routing(model, on=False)
    tps = tps_by_routing.get("learned") or next(iter(tps_by_routing.values()))
    profile = None
    if args.profile and "ours[recipe]" in built:
        from benchmarks.gpu_profile import markdown, profile_step_fn

        folder = Path(args.profile)
        model, step = built["ours[recipe]"]
        profile = profile_step_fn(lambda: step(batches[0]), 2, folder / "trace_ours_recipe.json", model=model)
        (folder / "profile_ours_recipe.md").write_text(markdown(profile))
        trace = folder / "trace_ours_recipe.json"  # kept gzipped: tens of MB as text; viewers read .json.gz
        with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace.unlink()
    from shared.model import count_params, flops_per_token

    plan_gib, cfg = recipe_plan_gib(s)
    fpt = flops_per_token(cfg.model, s.seq, count_params(cfg.model))
    facts = device_facts(device)
    hf_best = max((n for n in tps if n.startswith("hf[")), key=tps.get)
    result = {
        "benchmark": "gpu_train_step", **facts, "shape": vars(s), "rounds": rounds, "params": counts,
        "flops_per_token": fpt, "tokens_per_s": tps,
        "mfu_vs_spec": {n: mfu(v, fpt, facts["peak_spec_flops"]) for n, v in tps.items()},
        "mfu_vs_measured": {n: mfu(v, fpt, facts["peak_measured_flops"]) for n, v in tps.items()},
        "peak_memory_gib": memory, "plan_gib_recipe": plan_gib, "hf_fastest": hf_best, "errors": errors,
        "ratio": tps["ours"] / tps[hf_best],
        "ratio_recipe": tps["ours[recipe]"] / tps[hf_best] if "ours[recipe]" in tps else None,
        "shape_name": "quick" if args.quick else args.shape,
        "head_flops_fraction": 6 * s.d_model * s.vocab / fpt,
        "optimizer": "torch.optim.AdamW, fused" if device.type == "cuda" else "torch.optim.AdamW, foreach",
        "tokens_per_s_by_routing": tps_by_routing,
        "ratio_by_routing": {r: {"ours": v["ours"] / v[hf_best], "ours[recipe]": v.get("ours[recipe]", 0) / v[hf_best]}
                             for r, v in tps_by_routing.items() if hf_best in v},
        "profile": profile,
    }
    for n, v in tps.items():
        m = result["mfu_vs_spec"][n]
        print(f"{n}: {v:,.0f} tokens/s" + (f", MFU {m:.1%} of spec" if m else "") +
              (f", peak {memory[n]:.1f} GiB" if memory[n] is not None else ""), flush=True)
    print(f"ours / {hf_best}: {result['ratio']:.2f}x; ours[recipe] / {hf_best}: {result['ratio_recipe'] or 0:.2f}x")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
