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
    .venv/bin/python benchmarks/router_balance.py --quick         # 2 arms, 30 steps (smoke)
    .venv/bin/python benchmarks/router_balance.py --arm NAME=OVERRIDES ...   # your own arms

The last output line is one JSON object: per arm its figures and overrides, and the recipe's balance
settings. An arm's overrides come after the benchmark's own, so an arm may set the steps, the batch
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


FROZEN_TOKENS = 131072


def frozen_router(cfg, tokens: int = FROZEN_TOKENS, calibrate: bool = False) -> dict:
    """The run's final model, frozen, routing the next `tokens` tokens of its training stream (from where
    its last checkpoint left the loader) with its eval-time bias: worst-layer and per-layer MaxVio beside
    the block-bootstrap floor on the same tokens (`moelab router frozen`). With `calibrate`, the bias is
    first re-solved on the `tokens` before those (`moelab router calibrate`) and the figures are taken
    on tokens the calibration never saw."""
    from services.trainer.data import with_parquet_documents
    from services.trainer.loop import run_dir
    from services.trainer.router_calibration import calibrate_checkpoint, frozen_report, load_checkpoint

    run = run_dir(cfg)
    if calibrate:
        record = calibrate_checkpoint(run, tokens, tokens, out=run / "calibrated", held_out=False)
        return {"before": record["before"]["train"], "after": record["after"]["train"]}
    cfg, model, _, meta, _ = load_checkpoint(run)
    return {"before": frozen_report(model, with_parquet_documents(cfg), meta["data"], tokens, held_out=False)["train"]}


def run_arm(recipe: str, name: str, overrides: list[str], seed: int, steps: int, out: str, calibrate: bool = False) -> dict:
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
            "eval_maxvio_global": result.get("eval/maxvio_global"), "frozen": frozen_router(cfg, calibrate=calibrate),
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="configs/tiny.yaml")
    p.add_argument("--steps", type=int, default=None, help="default: the recipe's train.steps")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--arm", action="append", default=[], help="NAME=override,override (replaces the built-in arms)")
    p.add_argument("--workers", type=int, default=2, help="arms trained at once (one thread each)")
    p.add_argument("--quick", action="store_true", help="2 arms, 1 seed, 30 steps")
    p.add_argument("--calibrate", action="store_true", help="also calibrate each final model and report it frozen")
    p.add_argument("--out", type=Path, default=None, help="results JSON (default: benchmarks/results/ unless --quick)")
    args = p.parse_args(argv)
    from shared.config import load_config

    arms = [(a.split("=", 1)[0], [o for o in a.split("=", 1)[1].split(",") if o]) for a in args.arm] or ARMS
    steps = args.steps or load_config(ROOT / args.recipe).train.steps
    if args.quick:
        arms, steps, args.seeds = arms[:2], 30, 1
    from services.trainer.data import prepare_shards, with_parquet_documents

    prepare_shards(with_parquet_documents(load_config(ROOT / args.recipe)), 0)  # once, before arms race to build them
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(args.workers) as pool:
        jobs = [pool.submit(run_arm, args.recipe, n, o, s, steps, tmp, args.calibrate) for n, o in arms for s in range(args.seeds)]
        runs = [j.result() for j in jobs]
    table = {}
    print(f"router balance: {args.recipe}, {steps} steps, {args.seeds} seed(s); step MaxVio over the second half; "
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
        row["overrides"] = dict(arms)[name]
        row["runs"] = rs
        table[name] = row
    rank_by = "calibrated_maxvio" if args.calibrate else "frozen_maxvio"
    for name in sorted(table, key=lambda n: table[n][rank_by]):  # ranked by the frozen figure, not the step MaxVio
        row = table[name]
        line = (f"{name:24s} {row['maxvio_last_half']:11.3f} {row['maxvio_peak_last_half']:6.2f} "
                f"{row['router_warnings']:8d} {row['eval_loss']:9.4f} {row['frozen_maxvio']:7.3f} "
                f"{row['frozen_floor']:6.3f} {row['frozen_ratio_to_floor']:7.2f}")
        if args.calibrate:
            line += f" {row['calibrated_maxvio']:10.3f} {row['calibrated_ratio_to_floor']:7.2f}"
        print(line)
    result = {"recipe": args.recipe, "steps": steps, "seeds": args.seeds, "frozen_tokens": FROZEN_TOKENS,
              "ranked_by": rank_by, "arms": table,
              "defaults": load_config(ROOT / args.recipe).model.moe.balance.model_dump(),
              "wall_seconds": round(time.perf_counter() - t0, 1), "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    out = args.out or (None if args.quick else ROOT / "benchmarks" / "results" / "router_balance.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_suffix(".tmp")
        tmp_out.write_text(json.dumps(result, indent=1))
        os.replace(tmp_out, out)
    print(json.dumps({k: v for k, v in result.items() if k != "arms"} | {"arms": {k: {x: y for x, y in v.items() if x != "runs"}
                                                                                   for k, v in table.items()}}))
    return result


if __name__ == "__main__":
    main()
