"""Native fp8 experts vs bf16 on one GPU: training tokens/s and the loss difference over ~50 steps.

The model has the proxy-7b2a layer shape (width 2560, GQA 20/4 heads, 64 routed experts × 512,
top-8, 2 shared), 3 layers (a dense first one, then 2 MoE), a byte vocabulary (256: the text is
Python's own documentation as bytes, `pydoc_data`), sequence 2048, 4 sequences per step. It trains
as the GPU recipes do — fp32 weights under bf16 autocast, Muon + AdamW (`shared.optim`) — from
the same initial weights on the same batches, with the routed and shared experts' GEMMs in:

* bf16 (the baseline), and bf16 again from another initialisation (seed + 1): the distance
  between the two bf16 runs is the size of a loss difference that means nothing;
* fp8 with `precision.backend: auto`, which on a GPU without transformer-engine is `native`
  (`torch._scaled_mm`) wherever its probe passes: the DeepSeek-V3 block recipe (1×128
  activations, 128×128 weights) and the per-row recipe (one `torch._scaled_grouped_mm` per
  grouped GEMM where torch has it). `auto` rather than `native`, so a recipe this GPU or torch
  cannot run natively is still measured (emulated) and the JSON says why;
* fp8 per-row on `precision.backend: torchao` (torchao's MoE fp8 grouped GEMM, the peer to beat),
  where torchao is installed (carried in `.gpu-wheels`); elsewhere left out, its reason in `errors`.

Steps are interleaved (every run takes step t before any takes t + 1, order rotating), the
tokens/s figure is the median step after 3 warm-up steps. Which backend each fp8 run really used
(`model.precision_backends`, with the reason) is in the JSON.

    python benchmarks/gpu_fp8.py --out benchmarks/results/gpu_fp8.json     # on a GPU
    python benchmarks/gpu_fp8.py --device cpu --quick                      # CPU smoke run (emulated fp8)

Last line: JSON with tokens_per_s, `ratio_fp8_block` / `ratio_fp8_row` / `ratio_fp8_row_torchao`
(fp8 / bf16 tokens/s), the final-loss differences `loss_diff_<run>` and `bf16_seed_spread`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]  # benchmarks/tokenize.py shadows stdlib
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.gpu_common import (  # noqa: E402
    device_facts,
    first_runs,
    median,
    module_gib,
    pick_device,
    text_bytes,
    write_result,
)

SHAPE = ["model.vocab_size=256", "model.d_model=2560", "model.n_layers=3", "model.n_heads=20", "model.n_kv_heads=4",
         "model.max_seq_len=2048", "model.moe.n_routed_experts=64", "model.moe.expert_hidden=512", "model.moe.top_k=8",
         "model.moe.n_shared_experts=2", "model.moe.n_groups=8", "model.moe.topk_groups=4",
         "model.mup.base_shapes={n_heads: 4, n_kv_heads: 2}"]  # as proxy-7b2a's muP base
QUICK = ["model.vocab_size=256", "model.d_model=64", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
         "model.max_seq_len=32", "model.moe.n_routed_experts=4", "model.moe.expert_hidden=64", "model.moe.top_k=2",
         "model.moe.n_shared_experts=1"]
RUNS = {  # name -> (seed, precision overrides)
    "bf16": (0, []),
    "bf16_seed1": (1, []),
    "fp8_block": (0, ["model.moe.precision.expert=fp8", "model.moe.precision.fp8_granularity=block"]),
    "fp8_row": (0, ["model.moe.precision.expert=fp8", "model.moe.precision.fp8_granularity=row"]),
    "fp8_row_torchao": (0, ["model.moe.precision.expert=fp8", "model.moe.precision.fp8_granularity=row",
                            "model.moe.precision.backend=torchao"]),
}
FP8_RUNS = ("fp8_block", "fp8_row", "fp8_row_torchao")


def build(shape: list[str], seed: int, precision: list[str], device: torch.device):
    from shared.config import load_config
    from shared.model import MoETransformer
    from shared.optim import build_optimizer

    cfg = load_config(_HERE.parent / "configs" / "tiny.yaml", [*shape, *precision, "optim.log_stats=false"])
    torch.manual_seed(seed)
    with device:
        model = MoETransformer(cfg.model)
    return model, build_optimizer(model, cfg.optim, 1000), cfg


def step_fn(model, opt, device: torch.device):
    def step(tokens: torch.Tensor) -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        (loss + aux["aux_loss"]).backward()
        opt.step()
        opt.zero_grad()
        model.update_router_biases()
        return float(loss.detach())

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny shapes, few steps (a smoke run)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--out", default=None, help="also write the JSON here (e.g. benchmarks/results/gpu_fp8.json)")
    args = p.parse_args()
    device = pick_device(args.device)
    shape, steps, batch, seq = (QUICK, 3, 2, 32) if args.quick else (SHAPE, args.steps, args.batch, args.seq)
    runs, build_errors = {}, {}
    for name, (seed, prec) in RUNS.items():
        try:
            runs[name] = build(shape, seed, prec, device)
        except RuntimeError as exc:  # a backend this machine lacks (torchao) refuses at build: said, not fatal
            if name == "bf16":
                raise
            build_errors[name] = str(exc)[:500]
            print(f"{name} left out: {build_errors[name]}", flush=True)
    stream = text_bytes(steps * batch * (seq + 1)).view(steps, batch, seq + 1).to(device)
    steppers = {name: step_fn(model, opt, device) for name, (model, opt, _) in runs.items()}
    memory, errors = first_runs({name: (lambda st=st: st(stream[0])) for name, st in steppers.items()}, device,
                                resident={name: module_gib(model) for name, (model, _, _) in runs.items()})
    if "bf16" in errors:
        raise SystemExit(f"the bf16 reference failed: {errors['bf16']}")
    errors = {**build_errors, **errors}
    runs = {n: v for n, v in runs.items() if n not in errors}
    steppers = {n: v for n, v in steppers.items() if n not in errors}
    losses: dict[str, list[float]] = {n: [] for n in runs}
    seconds: dict[str, list[float]] = {n: [] for n in runs}
    import time

    names = list(runs)
    for t in range(1, steps):  # step 0 ran while measuring memory
        for name in names[t % len(names):] + names[: t % len(names)]:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            losses[name].append(steppers[name](stream[t]))  # float(loss) synchronises
            seconds[name].append(time.perf_counter() - t0)
    warm = min(3, len(seconds["bf16"]) - 1)
    tps = {n: batch * seq / median(s[warm:]) for n, s in seconds.items()}
    tail = max(1, min(10, len(losses["bf16"]) // 2))
    final = {n: sum(v[-tail:]) / tail for n, v in losses.items()}
    result = {
        "benchmark": "gpu_fp8", **device_facts(device), "steps": steps, "tokens_per_step": batch * seq,
        "backends": {n: m.precision_backends for n, (m, _, _) in runs.items()},
        "tokens_per_s": tps, **{f"ratio_{n}": tps[n] / tps["bf16"] for n in FP8_RUNS if n in tps},
        "final_loss": final, **{f"loss_diff_{n}": final[n] - final["bf16"] for n in FP8_RUNS if n in final},
        "bf16_seed_spread": final["bf16_seed1"] - final["bf16"] if "bf16_seed1" in final else None,
        "losses": losses, "peak_memory_gib": memory, "errors": errors,
    }
    for n in names:
        print(f"{n}: {tps[n]:,.0f} tokens/s, final loss {final[n]:.4f}", flush=True)
    write_result(result, args.out)


if __name__ == "__main__":
    main()
