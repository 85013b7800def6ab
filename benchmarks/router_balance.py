"""Router balance at small batch: which bias-update and aux-loss settings keep MaxVio low, at what loss.

Each arm is a real `moelab train` run of a recipe (default configs/tiny.yaml: 8 experts, top-2,
2,048 tokens per step in 16 micro-batches, 200 steps) with a few overrides. Per arm we read the run's metrics.jsonl
(router statistics of the global batch, every step) and report, for the second half of the run:
the mean MaxVio of the worst MoE layer (and of every layer), the largest MaxVio seen (an expert at
(1 + MaxVio)× its balanced share; the acceptance bar is < 2×), the router-health warnings the run
raised, and the final held-out loss. Then the final model, frozen, routes the next 131,072 tokens
of its training stream (tokens it has not trained on) with its eval-time bias, and its worst-layer
MaxVio is read beside the block-bootstrap floor of the same tokens (`moelab router frozen`): the step
MaxVio of a bias that moves after every micro-batch is kept low by feedback a deployed model no
longer has, so arms are ranked by the frozen figure. `--calibrate` also re-solves each final model's
bias on the 131,072 tokens before those (`moelab router calibrate`) and reports it the same way. The peer is the shipped DeepSeek-V3 setting (sign rule,
γ = 1e-3, α = 1e-4); Loss-Free Balancing (Wang et al. 2024, arXiv:2408.15664) reports MaxVio_global
0.72 with an aux loss against 0.04 loss-free at 1B scale and huge batches, the reference our small
batches are measured against.

    .venv/bin/python benchmarks/router_balance.py                 # the 8-arm ladder, 2 seeds (~30 min idle)
    .venv/bin/python benchmarks/router_balance.py --arms frozen --seeds 4 --calibrate \
        --out benchmarks/results/router_balance_arms.json         # the frozen-router arms, paired seeds
    .venv/bin/python benchmarks/router_balance.py --quick         # 2 arms, 30 steps (smoke)
    .venv/bin/python benchmarks/router_balance.py --arm NAME=OVERRIDES ...   # your own arms

Arms are ranked by the frozen (with `--calibrate`, the calibrated) worst-layer MaxVio among those whose
mean eval loss is within 0.01 of the first arm's, then the others; every arm's frozen figures and
eval loss are also given as seed-by-seed differences from the first arm (same seed, same data),
with the range over seeds. The last output line is one JSON object: per arm its figures and
overrides, the recipe's balance settings, the commit and the machine. An arm's overrides come after the benchmark's own, so an arm may set the steps, the batch
shape or the seed.
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
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from concurrent.futures import ProcessPoolExecutor  # noqa: E402  (imports `tokenize`: after the path fix)

from shared.config.model import BalanceConfig  # noqa: E402
from shared.data.atomic import atomic_write_json  # noqa: E402
from shared.provenance import cpu_and_flags, tree_commit  # noqa: E402

B = "model.moe.balance"
# The ladder of docs/moe.md, from the shipped DeepSeek-V3 setting (the peer) to the tiny recipe, one
# change per arm; each arm undoes what the recipe has and the arm has not reached yet.
SHIPPED = [f"{B}.bias_update_rule=sign", f"{B}.bias_update_rate=0.001", f"{B}.bias_update_every=step",
           f"{B}.seq_aux_alpha=0.0001", "optim.lr=0.003", "optim.lr_scales={}",
           "train.micro_batch_size=8", "train.grad_accum=1"]


def _ladder() -> list[tuple[str, list[str]]]:
    arms, ov = [("shipped_deepseek", list(SHIPPED))], dict(o.split("=", 1) for o in SHIPPED)
    for name, change in [("lr_3e-2", {"optim.lr": "0.03"}),
                         ("error_rule_3e-2", {f"{B}.bias_update_rule": "error", f"{B}.bias_update_rate": "0.03"}),
                         ("router_lr_x0.1", {"optim.lr_scales": "{router: 0.1}"}),
                         ("seq_alpha_1e-2", {f"{B}.seq_aux_alpha": "0.01"}),
                         ("micro_batch_4x2", {f"{B}.bias_update_every": "micro_batch", "train.micro_batch_size": "2",
                                              "train.grad_accum": "4"}),
                         ("micro_batch_8x1", {"train.micro_batch_size": "1", "train.grad_accum": "8"}),
                         ("recipe_16x1", {"train.grad_accum": "16"})]:
        ov.update(change)
        arms.append((name, [f"{k}={v}" for k, v in ov.items()]))
    return arms


ARMS = _ladder()
# The training-time arms judged by the frozen router (docs/moe.md, *Which recipe balances frozen*): the
# recipe, then one change each; every arm is also calibrated (`--calibrate`) and compared with the
# recipe seed by seed.
FROZEN_ARMS = [("recipe", []),
               ("bias_window_65k", [f"{B}.bias_update_window_tokens=65536"]),
               ("router_cooldown_0.15", [f"{B}.router_lr_cooldown=0.15"]),
               ("seq_alpha_1e-3", [f"{B}.seq_aux_alpha=0.001"])]
ARM_SETS = {"ladder": ARMS, "frozen": FROZEN_ARMS}
EQUAL_LOSS = 0.01  # arms within this much of the baseline's mean eval loss are ranked together


FROZEN_TOKENS = 131072
# calibrated as the recipes calibrate at the end of a run, unless --calibration-tokens says otherwise
CALIBRATION_TOKENS = BalanceConfig.model_fields["calibration_tokens"].default


def frozen_router(cfg, tokens: int = FROZEN_TOKENS, calibrate: bool = False,
                  calibration_tokens: tuple[int, ...] = (CALIBRATION_TOKENS,)) -> dict:
    """The run's final model, frozen, routing the next `tokens` tokens of its training stream (from where
    its last checkpoint left the loader) with its eval-time bias: worst-layer and per-layer MaxVio beside
    the block-bootstrap floor on the same tokens (`moelab router frozen`). With `calibrate`, the bias is
    first re-solved on the training-stream tokens before those (`moelab router calibrate`) and the
    figures are taken on tokens the calibration never saw. Several `calibration_tokens` sizes each
    calibrate on that many tokens and are all judged on the same `tokens` after the largest; `after`
    is the first size's figure, `after_by_tokens` every size's."""
    from services.trainer.data import with_parquet_documents
    from services.trainer.loop import run_dir
    from services.trainer.router_calibration import calibrate_checkpoint, frozen_report, load_checkpoint

    run = run_dir(cfg)
    if calibrate:
        judged_after = max(calibration_tokens)
        out: dict = {"after_by_tokens": {}}
        for n in calibration_tokens:
            folder = run / ("calibrated" if n == calibration_tokens[0] else f"calibrated-{n}")
            record = calibrate_checkpoint(run, n, tokens, out=folder, held_out=False, eval_after=judged_after)
            out.setdefault("before", record["before"]["train"])
            out.setdefault("after", record["after"]["train"])
            out["after_by_tokens"][str(n)] = record["after"]["train"]
        return out
    cfg, model, _, meta, _ = load_checkpoint(run)
    return {"before": frozen_report(model, with_parquet_documents(cfg), meta["data"], tokens, held_out=False)["train"]}


def _spread(rs: list[dict], calibrate: bool) -> dict:
    """The smallest and largest frozen (and calibrated) worst-layer MaxVio over the arm's seeds."""
    out = {}
    for when, key in (("before", "frozen"), ("after", "calibrated")) if calibrate else (("before", "frozen"),):
        values = [r["frozen"][when]["maxvio_worst"] for r in rs]
        out[f"{key}_maxvio_range"] = [min(values), max(values)]
    return out


def paired_with(rs: list[dict], base: list[dict], calibrate: bool) -> dict:
    """Seed-by-seed differences from the baseline arm (same seed, same data order): eval loss, LM loss
    on the frozen measure's tokens, and the frozen (and calibrated) worst-layer MaxVio, each as the
    list over seeds, and their mean."""
    by_seed = {r["seed"]: r for r in base}
    pairs = [(r, by_seed[r["seed"]]) for r in rs if r["seed"] in by_seed]
    out = {"paired_seeds": [r["seed"] for r, _ in pairs],
           "paired_eval_loss_diff": [r["eval_loss"] - b["eval_loss"] for r, b in pairs],
           # the LM loss on the frozen measure's 131k training-stream tokens: a steadier loss than the eval's
           "paired_stream_loss_diff": [r["frozen"]["before"]["lm_loss"] - b["frozen"]["before"]["lm_loss"] for r, b in pairs]}
    for when, key in (("before", "frozen"), ("after", "calibrated")) if calibrate else (("before", "frozen"),):
        out[f"paired_{key}_diff"] = [r["frozen"][when]["maxvio_worst"] - b["frozen"][when]["maxvio_worst"] for r, b in pairs]
    for k in [k for k in out if k.endswith("_diff")]:
        out[k + "_mean"] = sum(out[k]) / len(out[k]) if out[k] else None
    return out


def reusable_runs(path: Path, recipe: str, steps: int, arms: list[tuple[str, list[str]]], calibrate: bool,
                  calibration_tokens: tuple[int, ...] = (CALIBRATION_TOKENS,)) -> dict:
    """{(arm, seed): run} of an earlier result file that this invocation would run identically: the same
    recipe, steps and overrides, and calibrated (on the same sample sizes) when this one calibrates.
    Each reused run keeps the commit it ran on (`commit`), so a merged file says which code made which run."""
    old = json.loads(Path(path).read_text())
    if old["recipe"] != recipe or old["steps"] != steps:
        return {}
    if calibrate and tuple(old.get("calibration_tokens", (FROZEN_TOKENS,))) != calibration_tokens:
        return {}
    wanted = dict(arms)
    out = {}
    for name, row in old["arms"].items():
        if name not in wanted or row["overrides"] != wanted[name]:
            continue
        for run in row["runs"]:
            if calibrate and "after" not in run["frozen"]:
                continue
            out[(name, run["seed"])] = run | {"commit": run.get("commit", old.get("commit"))}
    return out


def run_arm(recipe: str, name: str, overrides: list[str], seed: int, steps: int, out: str, calibrate: bool = False,
            calibration_tokens: tuple[int, ...] = (CALIBRATION_TOKENS,)) -> dict:
    import torch

    torch.set_num_threads(1)
    from services.trainer.launch import run_local
    from services.trainer.loop import run_dir
    from services.trainer.metrics import read_metrics
    from shared.config import load_config

    # the arm's own overrides come last: an arm may change the step count or the batch shape
    cfg = load_config(ROOT / recipe, [f"train.seed={seed}", f"train.steps={steps}", f"train.out_dir={out}",
                                      f"train.run_name={name}-s{seed}", "train.device=cpu", "tracker.mode=disabled",
                                      *overrides])
    steps = cfg.train.steps
    cfg.train.eval_every = steps
    t0 = time.perf_counter()
    result = run_local(cfg)
    series = read_metrics(run_dir(cfg) / "metrics.jsonl")
    layers = sorted(k for k in series if k.startswith("router/maxvio/layer"))
    half = [s for s in sorted(series["router/maxvio"]) if s >= steps // 2]
    per_layer = {k.rsplit("/", 1)[1]: sum(series[k][s] for s in half) / len(half) for k in layers}
    return {"arm": name, "seed": seed, "maxvio_last_half": max(per_layer.values()), "maxvio_per_layer": per_layer,
            "maxvio_peak_last_half": max(series["router/maxvio"][s] for s in half),
            "router_warnings": result.get("router_warnings"), "eval_loss": result.get("eval/loss"),
            "eval_maxvio_global": result.get("eval/maxvio_global"), "frozen": frozen_router(cfg, calibrate=calibrate, calibration_tokens=calibration_tokens),
            "seconds": round(time.perf_counter() - t0, 1), "commit": tree_commit()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="configs/tiny.yaml")
    p.add_argument("--steps", type=int, default=None, help="default: the recipe's train.steps")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--first-seed", type=int, default=0, help="seeds first-seed … first-seed + seeds − 1")
    p.add_argument("--arms", choices=sorted(ARM_SETS), default="ladder",
                   help="built-in arms: the ladder (shipped → recipe), or the frozen-router arms (the recipe, a "
                        "65k-token bias window, a router-LR cooldown, a lower sequence-wise α)")
    p.add_argument("--arm", action="append", default=[], help="NAME=override,override (replaces the built-in arms)")
    p.add_argument("--workers", type=int, default=2, help="arms trained at once (one thread each)")
    p.add_argument("--quick", action="store_true", help="2 arms, 1 seed, 30 steps")
    p.add_argument("--calibrate", action="store_true", help="also calibrate each final model and report it frozen")
    p.add_argument("--calibration-tokens", default=str(CALIBRATION_TOKENS),
                   help="calibration sample sizes, comma-separated (default: the recipes' model.moe.balance.calibration_tokens) (each judged on the same tokens after the largest; "
                        "the first is the ranked figure)")
    p.add_argument("--reuse", type=Path, action="append", default=[],
                   help="a result file of this benchmark (repeatable): its runs of the same arm (same overrides), seed, recipe and "
                        "steps are taken from it instead of trained again (recorded in the result)")
    p.add_argument("--out", type=Path, default=None, help="results JSON (default: benchmarks/results/ unless --quick)")
    args = p.parse_args(argv)
    try:
        calibration_tokens = tuple(int(n) for n in args.calibration_tokens.split(",") if n)
    except ValueError:
        p.error(f"--calibration-tokens {args.calibration_tokens!r}: whole numbers, comma-separated")
    if not calibration_tokens or len(set(calibration_tokens)) != len(calibration_tokens):
        p.error(f"--calibration-tokens {args.calibration_tokens!r}: one or more distinct sizes")
    from shared.config import load_config

    arms = [(a.split("=", 1)[0], [o for o in a.split("=", 1)[1].split(",") if o]) for a in args.arm] or ARM_SETS[args.arms]
    if args.quick:  # before the seed list is made from it
        args.seeds = 1
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    steps = args.steps or load_config(ROOT / args.recipe).train.steps
    if args.quick:
        arms, steps = arms[:2], 30
    from services.trainer.data import prepare_shards, with_parquet_documents

    prepare_shards(with_parquet_documents(load_config(ROOT / args.recipe)), 0)  # once, before arms race to build them
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    done = {k: v for path in args.reuse
            for k, v in reusable_runs(path, args.recipe, steps, arms, args.calibrate, calibration_tokens).items()}
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(args.workers) as pool:
        jobs = {(n, s): pool.submit(run_arm, args.recipe, n, o, s, steps, tmp, args.calibrate, calibration_tokens)
                for n, o in arms for s in seeds if (n, s) not in done}
        runs = [done[(n, s)] if (n, s) in done else jobs[(n, s)].result() for n, _ in arms for s in seeds]
    table = {}
    print(f"router balance: {args.recipe}, {steps} steps, seeds {seeds}; step MaxVio over the second half; "
          f"frozen: the final model on the next {FROZEN_TOKENS:,} training-stream tokens"
          + (", after calibration on the tokens before them" if args.calibrate else ""))
    print(f"{'arm':24s} {'step MaxVio':>11s} {'peak':>6s} {'warnings':>8s} {'eval loss':>9s} "
          f"{'frozen':>7s} {'floor':>6s} {'x floor':>7s}" + (f" {'calibrated':>10s} {'x floor':>7s}" if args.calibrate else ""))
    for name, _ in arms:
        rs = [r for r in runs if r["arm"] == name]
        row = {k: sum(r[k] for r in rs) / len(rs) for k in ("maxvio_last_half", "maxvio_peak_last_half", "eval_loss")}
        for when in ("before", "after") if args.calibrate else ("before",):
            key = "frozen" if when == "before" else "calibrated"
            row[f"{key}_maxvio"] = sum(r["frozen"][when]["maxvio_worst"] for r in rs) / len(rs)
            row[f"{key}_floor"] = sum(r["frozen"][when]["floor_worst"] for r in rs) / len(rs)
            row[f"{key}_ratio_to_floor"] = sum(r["frozen"][when]["ratio_to_floor"] for r in rs) / len(rs)
        row["router_warnings"] = sum(r["router_warnings"] for r in rs)
        if args.calibrate and len(calibration_tokens) > 1:
            for n in calibration_tokens:
                figs = [r["frozen"]["after_by_tokens"][str(n)] for r in rs]
                row[f"calibrated_{n}_maxvio"] = sum(f["maxvio_worst"] for f in figs) / len(figs)
                row[f"calibrated_{n}_ratio_to_floor"] = sum(f["ratio_to_floor"] for f in figs) / len(figs)
                row[f"calibrated_{n}_maxvio_range"] = [min(f["maxvio_worst"] for f in figs), max(f["maxvio_worst"] for f in figs)]
        row.update(_spread(rs, args.calibrate))
        row["overrides"] = dict(arms)[name]
        row["runs"] = rs
        table[name] = row
    baseline = arms[0][0]
    for row in table.values():
        row.update(paired_with(row["runs"], table[baseline]["runs"], args.calibrate))
        row["equal_eval_loss"] = abs(row["eval_loss"] - table[baseline]["eval_loss"]) <= EQUAL_LOSS
    rank_by = "calibrated_maxvio" if args.calibrate else "frozen_maxvio"
    # ranked by the frozen figure (not the step MaxVio), among the arms at the baseline's eval loss first
    order = sorted(table, key=lambda n: (not table[n]["equal_eval_loss"], table[n][rank_by]))
    for name in order:
        row = table[name]
        line = (f"{name:24s} {row['maxvio_last_half']:11.3f} {row['maxvio_peak_last_half']:6.2f} "
                f"{row['router_warnings']:8d} {row['eval_loss']:9.4f} {row['frozen_maxvio']:7.3f} "
                f"{row['frozen_floor']:6.3f} {row['frozen_ratio_to_floor']:7.2f}")
        if args.calibrate:
            line += f" {row['calibrated_maxvio']:10.3f} {row['calibrated_ratio_to_floor']:7.2f}"
        if not row["equal_eval_loss"]:
            line += f"  (eval loss {row['eval_loss'] - table[baseline]['eval_loss']:+.3f} vs {baseline})"
        print(line)
        if args.calibrate and len(calibration_tokens) > 1:
            print(" " * 26 + "calibrated on " + ", ".join(
                f"{n:,} tokens: {row[f'calibrated_{n}_maxvio']:.3f} ({row[f'calibrated_{n}_ratio_to_floor']:.2f}x floor)"
                for n in calibration_tokens) + f", all judged after {max(calibration_tokens):,}")
    result = {"recipe": args.recipe, "calibration_tokens": list(calibration_tokens) if args.calibrate else None, "steps": steps, "seeds": args.seeds, "first_seed": args.first_seed, "frozen_tokens": FROZEN_TOKENS,
              "ranked_by": rank_by, "ranking": order, "baseline": baseline, "equal_eval_loss": EQUAL_LOSS,
              "arms": table, "commit": tree_commit(), "reused_from": [str(p) for p in args.reuse], "machine": {"cpu": cpu_and_flags()[0], "cores": os.cpu_count(),
                                                                  "threads_per_run": 1, "workers": args.workers},
              "defaults": load_config(ROOT / args.recipe).model.moe.balance.model_dump(),
              "wall_seconds": round(time.perf_counter() - t0, 1), "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    out = args.out or (None if args.quick else ROOT / "benchmarks" / "results" / "router_balance.json")
    if out is not None:
        atomic_write_json(out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "arms"} | {"arms": {k: {x: y for x, y in v.items() if x != "runs"}
                                                                                   for k, v in table.items()}}))
    return result


if __name__ == "__main__":
    main()
