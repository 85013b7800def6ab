"""The precision-stability experiment: bf16, fp8 and nvfp4 (emulated) experts × the stability recipe
on/off × seeds, at the reference horizon (3,000 steps), where small-batch routing matters.

The reference finding: with the Kaiju-style recipe (muP multipliers 10.66 / 0.125, the bungee
scalar at 2.0, no gradient clipping) the fp8−bf16 loss gap falls from ~0.8 to < 0.1 at 3,000
steps. Every run here is a real `moelab train` run (the trainer, its router-bias update, its
metrics and the tracker) of configs/tiny.yaml reshaped to route hard: 32 fine-grained experts of
width 16, top-4, one shared expert, 4 × 64 = 256 tokens per step. Arms:

- **main**: {bf16, fp8, nvfp4} × {recipe, no recipe (SP, no bungee, clip 1.0)} × seeds;
- **ablations**: the recipe with one knob changed — muP multipliers off, clipping at 1.0, no
  bungee, the bungee on the experts' output instead of their input — in bf16 (`--ablation-modes
  bf16,fp8` adds fp8: worth it where the main arms show an fp8 gap for a knob to close);
- **harsh**: attention and dense GEMMs in the low format too, with per-tensor fp8 scales, or
  nvfp4 without the Hadamard transform, stochastic rounding or 2-D weight blocks — recipe on/off:
  where the experts-only formats do not degrade, this is where to look for the gap.

Each arm trains at its own tuned LR (`--tune-lr` sweeps each setting, the ablations included, in
bf16 over a grid for `--tune-steps` and takes the best loss among the LRs whose routing
stayed under the trainer's router-health MaxVio line: a collapsing router can post a good 600-step
loss and fail at 3,000); an arm compared at a borrowed LR measures the LR, not the recipe. Every
run reports to the tracker (loss, eval loss, MaxVio per layer, dead experts, router- and
expert-gradient norms; `--tracker offline` spools under the work folder for `moelab tracker sync`),
and one comparison plot is written beside the JSON. Losses are the training loss over the last
tenth of the run (see TAIL_FRACTION: held out, in distribution, paired across formats); the
handbook eval loss is reported beside it. The gaps are read against the seed spread of bf16 (two
inits and data orders, same recipe): a gap smaller than that is noise.

    .venv/bin/python benchmarks/precision_gap.py --tune-lr          # everything: ~1.8 h on 2 cores (resumable)
    .venv/bin/python benchmarks/precision_gap.py --tune-lr --no-ablations --no-harsh   # the main grid alone: ~45 min
    .venv/bin/python benchmarks/precision_gap.py --quick            # smoke run (a few minutes)

Every finished run's figures are kept under `--work-dir` (runs/precision_gap), keyed by its
shape, overrides, seed and steps, so the same command run again continues where an interrupted
one stopped, and a changed arm is trained afresh. The key does not hold the code: after a change to
the model, trainer or precision code, give a fresh `--work-dir`.

The last output line is one JSON object with fp8_gap, nvfp4_gap, fp8_gap_no_recipe,
nvfp4_gap_no_recipe, the seed spreads and, per arm, the final MaxVio and dead experts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The script's folder is sys.path[0]; a sibling benchmark named like a stdlib module (tokenize.py)
# would shadow it, so import from the repository root instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from concurrent.futures import ProcessPoolExecutor  # noqa: E402  (imports `tokenize`: after the path fix)

MODES = ("bf16", "fp8", "nvfp4")
# The bias rate is the shape's own: tiny.yaml's 0.03 suits its 16 micro-batches of 128 tokens, but
# with one 256-token micro-batch per step (32 assignments per expert) each load error is mostly
# sampling noise, and at 600 steps (bf16, recipe, lr 1.6e-2) 0.03 left the last-half MaxVio at 1.73
# and 0.1 collapsed it (5.6), while 0.01 gave 0.77 (0.83-0.93 at lr 8e-3 to 3.2e-2 with the
# sequence-wise alpha at 1e-3).
SHAPE = ["model.moe.n_routed_experts=32", "model.moe.expert_hidden=16", "model.moe.top_k=4", "model.moe.n_shared_experts=1",
         "train.micro_batch_size=4", "train.seq_len=64", "train.grad_accum=1", "model.moe.precision.emulate_bf16=true",
         "model.moe.balance.bias_update_rate=0.01"]
RECIPE: list[str] = []  # the recipe is the default config
NO_RECIPE = ["model.mup.enabled=false", "model.moe.bungee=false", "optim.grad_clip=1.0"]
ABLATIONS = {
    "no_mup_scales": ["model.mup.enabled=false"],
    "clip": ["optim.grad_clip=1.0"],
    "no_bungee": ["model.moe.bungee=false"],
    "bungee_output": ["model.moe.bungee.placement=output"],
}
# Harsher low precision, to find where the no-recipe runs do degrade if the recipe's precision
# (fine-scaled expert GEMMs, bf16 attention) does not: every GEMM but the head, router and shared
# expert in the low format, coarse scales, no Hadamard transform or stochastic rounding.
HARSH = {
    "fp8_all_tensor": ["model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8",
                       "model.moe.precision.fp8_granularity=tensor"],
    "nvfp4_all_plain": ["model.moe.precision.expert=nvfp4", "model.moe.precision.dense=nvfp4",
                        "model.moe.precision.hadamard='off'", "model.moe.precision.nvfp4_grad_stochastic=false",
                        "model.moe.precision.nvfp4_weight_2d=false"],
}
TUNE_GRID = (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2, 1.28e-1)
# The measure every comparison uses: the training loss over the last tenth of the run. Each batch
# is scored before the model trains on it and 3,000 steps read under one epoch of every source,
# so this is a held-out loss on the training distribution over ~77k tokens, and runs with one seed
# (bf16, fp8, nvfp4) read the same batches: their difference is paired. The eval loss (the
# handbook, another distribution, EVAL_BATCHES batches) is reported beside it.
TAIL_FRACTION = 0.1
EVAL_BATCHES = 32


def _cache_key(overrides: list[str], seed: int, steps: int) -> dict:
    return {"shape": SHAPE, "overrides": list(overrides), "seed": seed, "steps": steps, "eval_batches": EVAL_BATCHES}


def cached_result(work: Path, name: str, overrides: list[str], seed: int, steps: int) -> dict | None:
    """A finished run's figures from `work`, if the same arm (shape, overrides, seed, steps) ran there."""
    path = work / "results" / f"{name}-s{seed}.json"
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if stored.get("key") != _cache_key(overrides, seed, steps):
        return None
    result = stored["result"]  # JSON made the curves' step keys strings
    result["curves"] = {k: {int(step): v for step, v in c.items()} for k, c in result["curves"].items()}
    return result


def train_arm(name: str, overrides: list[str], seed: int, steps: int, work: str, tracker: list[str]) -> dict:
    """One training run; returns its end figures and its curves (from the run's metrics.jsonl), and
    keeps them under `work`/results so a rerun of the experiment reuses the finished run."""
    import shutil

    import torch

    torch.set_num_threads(1)
    from services.trainer.launch import run_local
    from services.trainer.loop import run_dir
    from services.trainer.metrics import read_metrics
    from shared.config import load_config
    from shared.data.atomic import atomic_write_json

    cfg = load_config(ROOT / "configs" / "tiny.yaml", [
        *SHAPE, *overrides, f"train.seed={seed}", f"train.steps={steps}", f"optim.warmup_steps={max(1, steps // 30)}",
        f"train.eval_every={max(1, steps // 6)}", f"train.eval_batches={EVAL_BATCHES}", f"train.out_dir={Path(work) / 'runs'}",
        f"train.run_name={name}-s{seed}", "train.device=cpu", f"train.checkpoint_every={steps}", *tracker,
    ])
    shutil.rmtree(run_dir(cfg), ignore_errors=True)  # an interrupted attempt's partial metrics
    t0 = time.perf_counter()
    result = run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    half = [s for s in sorted(series["loss"]) if s >= steps // 2]

    def last_half(key: str) -> float | None:
        vals = [series[key][s] for s in half if s in series.get(key, {})]
        return sum(vals) / len(vals) if vals else None

    maxvio_layers = [k for k in series if k.startswith("router/maxvio/layer")]
    tail = sorted(series["loss"])[-max(1, round(steps * TAIL_FRACTION)):]
    figures = {
        "name": name, "seed": seed, "loss_tail": sum(series["loss"][s] for s in tail) / len(tail),
        "eval_loss": result.get("eval/loss"), "finite": result.get("bad_steps", 0) == 0,
        "maxvio_last_half": max(last_half(k) for k in maxvio_layers) if maxvio_layers else None,
        "eval_maxvio_global": result.get("eval/maxvio_global"), "dead_experts": result.get("router/dead_experts"),
        "grad_norm_router": last_half("grad_norm/router"), "grad_norm_experts": last_half("grad_norm/experts"),
        "seconds": round(time.perf_counter() - t0, 1), "run_id": result.get("run_id"),
        "curves": {k: series[k] for k in ("loss", "router/maxvio", "eval/loss") if k in series},
    }
    atomic_write_json(Path(work) / "results" / f"{name}-s{seed}.json",
                      {"key": _cache_key(overrides, seed, steps), "result": figures})
    return figures


def run_arms(pool, specs: list[tuple[str, list[str], int, int, list[str]]], work: Path) -> list[dict]:
    """Every (name, overrides, seed, steps, tracker) run, in order: a finished one from `work`, the
    rest trained on `pool`."""
    cached = [cached_result(work, n, o, seed, steps) for n, o, seed, steps, _ in specs]
    if any(c is not None for c in cached):
        print(f"reusing {sum(c is not None for c in cached)} of {len(specs)} runs finished earlier in {work}", flush=True)
    jobs = [c if c is not None else pool.submit(train_arm, n, o, seed, steps, str(work), tr)
            for c, (n, o, seed, steps, tr) in zip(cached, specs, strict=True)]
    return [j if isinstance(j, dict) else j.result() for j in jobs]


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarize(runs: list[dict]) -> dict[str, dict]:
    """Per arm (all seeds): mean loss (the last tenth's training loss), its seed spread, eval loss,
    MaxVio, dead experts, gradient norms."""
    arms: dict[str, dict] = {}
    for name in dict.fromkeys(r["name"] for r in runs):
        rs = [r for r in runs if r["name"] == name]
        losses = [r["loss_tail"] for r in rs]
        arms[name] = {
            "loss": _mean(losses), "seed_spread": max(losses) - min(losses) if len(losses) > 1 else None,
            "eval_loss": _mean(r["eval_loss"] for r in rs),
            "maxvio_last_half": _mean(r["maxvio_last_half"] for r in rs),
            "eval_maxvio_global": _mean(r["eval_maxvio_global"] for r in rs),
            "dead_experts": max((r["dead_experts"] or 0) for r in rs),
            "grad_norm_router": _mean(r["grad_norm_router"] for r in rs),
            "grad_norm_experts": _mean(r["grad_norm_experts"] for r in rs),
            "finite": all(r["finite"] for r in rs), "seeds": len(rs),
            "loss_by_seed": {str(r["seed"]): r["loss_tail"] for r in rs},
        }
    return arms


def paired_gaps(arms: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Each arm's loss minus its bf16 reference's on the same seed (same initialisation, same
    batches): the main and harsh arms against bf16 of their setting, the ablations against the
    bf16 recipe. A gap read this way is not blurred by the seed spread the two arms share."""
    out: dict[str, dict[str, float]] = {}
    for name, arm in arms.items():
        mode, setting = name.rsplit("-", 1)
        if name in ("bf16-recipe", "bf16-no_recipe"):
            continue
        ref = arms.get("bf16-recipe" if mode == "bf16" else f"bf16-{setting}")
        if ref is None:
            continue
        out[name] = {seed: round(loss - ref["loss_by_seed"][seed], 5)
                     for seed, loss in arm["loss_by_seed"].items() if seed in ref["loss_by_seed"]}
    return out


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    colors = {"bf16": "tab:blue", "fp8": "tab:orange", "nvfp4": "tab:red", "fp8_all_tensor": "tab:brown",
              "nvfp4_all_plain": "tab:purple"}
    for name in dict.fromkeys(r["name"] for r in runs):
        mode, _, setting = name.partition("-")
        if setting not in ("recipe", "no_recipe"):
            continue
        rs = [r for r in runs if r["name"] == name]
        style = "-" if setting == "recipe" else "--"
        for ax, key in zip(axes, ("loss", "router/maxvio"), strict=True):
            steps = sorted(set.intersection(*(set(r["curves"].get(key, {})) for r in rs)))
            if not steps:
                continue
            ys = [sum(r["curves"][key][s] for r in rs) / len(rs) for s in steps]
            k = max(1, len(ys) // 60)  # a moving average over ~1/60 of the run
            smooth = [sum(ys[max(0, i - k):i + 1]) / len(ys[max(0, i - k):i + 1]) for i in range(len(ys))]
            ax.plot(steps, smooth, style, color=colors.get(mode, "k"), label=f"{mode}, {setting.replace('_', ' ')}")
    axes[0].set(title="training loss (mean over seeds)", xlabel="step", ylabel="loss (nats)")
    axes[1].set(title="router MaxVio, worst layer (global batch)", xlabel="step", ylabel="MaxVio", yscale="log")
    axes[0].legend(fontsize=8)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def tune(args, pool, work: Path) -> dict:
    """The best LR of each setting in bf16 over TUNE_GRID at --tune-steps (last-tenth loss): the
    recipe, no recipe, and (unless --no-ablations) each ablation, whose knob may move its optimum
    (muP's multipliers off is standard parameterisation, whose LR is not the recipe's)."""
    settings = {"recipe": RECIPE, "no_recipe": NO_RECIPE, **({} if args.no_ablations else ABLATIONS)}
    # Tuning runs are not tracked: they only pick LRs (an online tracker with no server would also
    # hold each run's end for its retry window).
    keys = [(setting, lr) for setting in settings for lr in TUNE_GRID]
    runs = run_arms(pool, [(f"tune-{setting}-lr{lr:g}",
                            [*settings[setting], "model.moe.precision.expert=bf16", f"optim.lr={lr}"],
                            0, args.tune_steps, ["tracker.mode=disabled"]) for setting, lr in keys], work)
    losses = {k: r["loss_tail"] for k, r in zip(keys, runs, strict=True)}
    maxvio = {k: r["maxvio_last_half"] for k, r in zip(keys, runs, strict=True)}
    best, collapsed = pick_lrs(losses, maxvio, collapse_maxvio())
    edge = [s for s, lr in best.items() if lr in (TUNE_GRID[0], TUNE_GRID[-1])]
    print("LR tuning (bf16, last-tenth loss / last-half MaxVio):",
          {f"{s} lr={lr:g}": (round(v, 4), None if maxvio[(s, lr)] is None else round(maxvio[(s, lr)], 2))
           for (s, lr), v in losses.items()})
    if edge:
        print(f"warning: the best LR of {edge} is at the edge of the grid {TUNE_GRID}")
    if collapsed:
        print(f"warning: MaxVio crossed the router-health line at every LR of {collapsed}; their arms compare "
              "unbalanced routers")
    return {**best, "grid": {f"{s}@{lr:g}": v for (s, lr), v in losses.items()},
            "grid_maxvio": {f"{s}@{lr:g}": v for (s, lr), v in maxvio.items()},
            "train_seconds": sum(r["seconds"] for r in runs)}


def collapse_maxvio() -> float:
    """The trainer's own router-health line (`train.router_health.maxvio_threshold`, 1.0: the
    busiest expert at twice its share). Half the shape's maximum (3.5) was tried first and let
    lr 6.4e-2 through at a last-half MaxVio of 3.1, four times the other LRs' 0.7-0.8."""
    from shared.config import load_config

    return load_config(ROOT / "configs" / "tiny.yaml", SHAPE).train.router_health.maxvio_threshold


def pick_lrs(losses: dict[tuple[str, float], float], maxvio: dict[tuple[str, float], float | None],
             ceiling: float) -> tuple[dict[str, float], list[str]]:
    """Each setting's LR: the best loss among the LRs whose routing did not collapse
    (last-half MaxVio ≤ `ceiling`), since a collapsed router can still post a good short-run loss
    and then fail over the full horizon; a setting that collapsed at every LR gets its best loss
    and is named in the second return value."""
    best, collapsed = {}, []
    for setting in dict.fromkeys(st for st, _ in losses):
        lrs = [lr for st, lr in losses if st == setting]
        stable = [lr for lr in lrs if maxvio[(setting, lr)] is not None and maxvio[(setting, lr)] <= ceiling]
        if not stable:
            collapsed.append(setting)
        best[setting] = min(stable or lrs, key=lambda lr: losses[(setting, lr)])
    return best, collapsed


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--lr", type=float, default=None, help="recipe arms' LR (default: tiny.yaml's, or --tune-lr)")
    p.add_argument("--lr-no-recipe", type=float, default=None, help="no-recipe arms' LR (default: as --lr)")
    p.add_argument("--set-lr", action="append", default=[], metavar="SETTING=LR",
                   help="one setting's LR (recipe, no_recipe or an ablation), over --lr and the tuning; repeatable")
    p.add_argument("--tune-lr", action="store_true", help="pick each setting's LR by a short bf16 sweep first")
    p.add_argument("--tune-steps", type=int, default=600)
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--ablation-modes", default="bf16",
                   help="expert formats the ablations train in, comma-separated (default bf16; e.g. bf16,fp8)")
    p.add_argument("--no-harsh", action="store_true", help="skip the all-GEMM low-precision arms")
    p.add_argument("--workers", type=int, default=2, help="runs trained at once (one thread each)")
    p.add_argument("--tracker", choices=("offline", "online", "disabled"), default="offline")
    p.add_argument("--quick", action="store_true", help="smoke run: 30 steps, 1 seed, no ablations, no tuning")
    p.add_argument("--no-progress", action="store_true", help="(kept for scripts; the trainer's bar is on stderr)")
    p.add_argument("--out", type=Path, default=None, help="results JSON (default: benchmarks/results/ unless --quick)")
    p.add_argument("--work-dir", type=Path, default=ROOT / "runs" / "precision_gap",
                   help="where the runs train and their figures are kept; a rerun reuses every finished run "
                        "(default: runs/precision_gap; a temporary folder with --quick)")
    args = p.parse_args(argv)
    set_lr = {}
    for item in args.set_lr:
        setting, _, value = item.partition("=")
        if setting not in ("recipe", "no_recipe", *ABLATIONS):
            p.error(f"--set-lr {item!r}: the setting is one of recipe, no_recipe, {', '.join(ABLATIONS)}")
        try:
            set_lr[setting] = float(value)
        except ValueError:
            p.error(f"--set-lr {item!r}: {value!r} is not a number")
    ablation_modes = [m for m in args.ablation_modes.split(",") if m]
    if not set(ablation_modes) <= set(MODES) or "bf16" not in ablation_modes:
        p.error(f"--ablation-modes {args.ablation_modes!r}: formats from {', '.join(MODES)}, bf16 among them "
                "(each ablation's gap is read against its bf16 run)")
    if args.quick:
        args.steps, args.seeds, args.no_ablations, args.no_harsh, args.tune_lr = 30, 1, True, True, False
    from services.trainer.data import prepare_shards, with_parquet_documents
    from shared.config import load_config

    out_json = args.out or (None if args.quick else ROOT / "benchmarks" / "results" / "precision_gap.json")
    shaped = load_config(ROOT / "configs" / "tiny.yaml", SHAPE)
    # Read from the config, not assumed: a change to tiny.yaml's batch would otherwise change the
    # experiment's batch unseen.
    tokens_per_step = shaped.train.micro_batch_size * shaped.train.seq_len * shaped.train.grad_accum
    prepare_shards(with_parquet_documents(shaped), 0)
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(args.workers) as pool:
        work = Path(tmp) if args.quick else args.work_dir
        spool = work / "spool"  # machine-local tracker data: beside the runs, not among the results
        tracker = [f"tracker.mode={args.tracker}", f"tracker.spool_dir={spool}"] if args.tracker != "disabled" else \
            ["tracker.mode=disabled"]
        tuned = tune(args, pool, work) if args.tune_lr else {}
        base_lr = load_config(ROOT / "configs" / "tiny.yaml").optim.lr
        lr = {"recipe": set_lr.get("recipe") or args.lr or tuned.get("recipe") or base_lr}
        lr["no_recipe"] = set_lr.get("no_recipe") or args.lr_no_recipe or tuned.get("no_recipe") or lr["recipe"]
        arms = [(f"{m}-{s}", [f"model.moe.precision.expert={m}", *o, f"optim.lr={lr[s]}"])
                for s, o in (("recipe", RECIPE), ("no_recipe", NO_RECIPE)) for m in MODES]
        if not args.no_ablations:
            lr.update({a: set_lr.get(a) or tuned.get(a) or lr["recipe"] for a in ABLATIONS})
            arms += [(f"{m}-{a}", [f"model.moe.precision.expert={m}", *o, f"optim.lr={lr[a]}"])
                     for a, o in ABLATIONS.items() for m in ablation_modes]
        if not args.no_harsh:
            arms += [(f"{h}-{st}", [*o, *ho, f"optim.lr={lr[st]}"])
                     for h, ho in HARSH.items() for st, o in (("recipe", RECIPE), ("no_recipe", NO_RECIPE))]
        for _, o in arms:  # every arm's config checked before an hour of training starts
            load_config(ROOT / "configs" / "tiny.yaml", [*SHAPE, *o])
        runs = run_arms(pool, [(n, o, seed, args.steps, [*tracker, "tracker.project=precision-gap"])
                               for n, o in arms for seed in range(args.seeds)], work)
    table = summarize(runs)

    def gap(mode: str, setting: str) -> float:
        return round(table[f"{mode}-{setting}"]["loss"] - table[f"bf16-{setting}"]["loss"], 5)

    print(f"precision gap: {args.steps} steps × {tokens_per_step} tokens, 32 experts top-4, {args.seeds} seed(s); LRs {lr}")
    print(f"{'arm':26s} {'loss':>7s} {'spread':>7s} {'eval loss':>9s} {'MaxVio':>7s} {'dead':>5s} {'|g| router':>10s} "
          f"{'|g| experts':>11s}")
    for name, a in table.items():
        spread = "-" if a["seed_spread"] is None else f"{a['seed_spread']:.4f}"
        print(f"{name:26s} {a['loss']:7.4f} {spread:>7s} {a['eval_loss']:9.4f} {a['maxvio_last_half'] or 0:7.3f} "
              f"{a['dead_experts']:5d} "
              f"{a['grad_norm_router'] or 0:10.4f} {a['grad_norm_experts'] or 0:11.4f}")
    result = {
        "fp8_gap": gap("fp8", "recipe"), "nvfp4_gap": gap("nvfp4", "recipe"),
        "fp8_gap_no_recipe": gap("fp8", "no_recipe"), "nvfp4_gap_no_recipe": gap("nvfp4", "no_recipe"),
        "bf16_seed_spread": table["bf16-recipe"]["seed_spread"], "bf16_seed_spread_no_recipe": table["bf16-no_recipe"]["seed_spread"],
        "bf16_loss": table["bf16-recipe"]["loss"], "bf16_loss_no_recipe": table["bf16-no_recipe"]["loss"],
        "bf16_eval_loss": table["bf16-recipe"]["eval_loss"], "bf16_eval_loss_no_recipe": table["bf16-no_recipe"]["eval_loss"],
        "paired_gaps_by_seed": paired_gaps(table),
        "harsh_gaps": {n.rsplit("-", 1)[0] + ("" if n.endswith("-recipe") else "_no_recipe"):
                       round(a["loss"] - table["bf16-" + n.rsplit("-", 1)[1]]["loss"], 5)
                       for n, a in table.items() if n.split("-")[0] in HARSH},
        "max_vio": {n: a["maxvio_last_half"] for n, a in table.items()},
        "dead_experts": {n: a["dead_experts"] for n, a in table.items()},
        "arms": table, "lr": lr, "lr_tuning": tuned.get("grid"), "lr_tuning_maxvio": tuned.get("grid_maxvio"), "all_finite": all(a["finite"] for a in table.values()),
        "steps": args.steps, "seeds": args.seeds, "tokens_per_step": tokens_per_step, "quick": args.quick,
        "loss_measure": f"training loss over the last {TAIL_FRACTION:.0%} of steps (scored before each update)",
        "wall_seconds": round(time.perf_counter() - t0, 1),
        # Every run's own training time, reused ones included: the experiment's cost however many
        # invocations it took (divided by --workers: its wall time on this machine, roughly).
        "train_seconds": round(sum(r["seconds"] for r in runs) + tuned.get("train_seconds", 0), 1),
        "workers": args.workers,
        "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "command": "benchmarks/precision_gap.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    if out_json is not None:
        from benchmarks.result_file import save_result

        out_json.parent.mkdir(parents=True, exist_ok=True)
        plot(runs, out_json.with_suffix(".png"))
        save_result(out_json, result)  # with the commit, the machine, its threads and load
    else:
        from benchmarks.result_file import run_record

        result.update({k: v for k, v in run_record().items() if k not in result})
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
