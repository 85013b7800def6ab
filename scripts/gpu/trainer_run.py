"""The trainer itself on the GPU: `moelab train --no-ray` on the H100 recipe for a bounded number of steps.

Why: a benchmark model is not the trainer. This runs the real command (data, tokenizer, model,
Muon + AdamW, router-bias updates, metrics) on `configs/proxy-7b2a-h100.yaml` for `--steps`
optimizer steps of `--grad-accum` micro-batches, then reads the run's own `metrics.jsonl` and
records: the loss at the first and last step, tokens/s and MFU (medians over the steps after the
first, which pays for compilation and allocator warm-up), the worst layer's MaxVio, the peak
device memory against `moelab plan`'s figure for the same config, and the commit. Held-out
evaluation and checkpoints are pushed past the run (the loop still saves one at the end: it goes
under `--run-root`, /dev/shm by default, and is deleted).

Without CUDA it runs `configs/tiny.yaml` at a tiny size on the CPU, so tests/scripts keeps the
script working between GPU sessions.

    python scripts/gpu/trainer_run.py --out $OUT/trainer.json      # last line: the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
GPU_RECIPE = "configs/proxy-7b2a-h100.yaml"
CPU_RECIPE = "configs/tiny.yaml"
CPU_SHAPE = ["model.n_layers=2", "model.vocab_size=4096", "train.seq_len=64", "model.max_seq_len=64",
             "train.micro_batch_size=2", "train.device=cpu", "train.dtype=float32"]


def overrides(steps: int, grad_accum: int, out_dir: str, cuda: bool) -> list[str]:
    """The recipe's overrides for a bounded run: steps, accumulation, every step logged, no tracker,
    evaluation and checkpoints past the last step."""
    bounded = [f"train.steps={steps}", f"train.grad_accum={grad_accum}", "train.log_every=1",
               f"train.eval_every={10**6}", "train.eval_batches=1", "train.eval_suite.enabled=false",
               f"train.checkpoint_every={10**6}", "train.keep_last=1", f"train.out_dir={out_dir}",
               "train.run_name=gpu-trainer-run", "tracker.mode=disabled"]
    return bounded if cuda else [*CPU_SHAPE, *bounded]


def summarize_run(metrics_path: Path, plan_gib: float, config: str, extra: list[str]) -> dict:
    """The run's figures from its metrics.jsonl (every step logged)."""
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "loss" in r and "tokens_per_s" in r]  # step rows, not evaluation rows
    if not rows:
        raise SystemExit(f"{metrics_path}: no step was logged")
    timed = rows[1:] or rows
    tps = [r["tokens_per_s"] for r in timed if isinstance(r.get("tokens_per_s"), (int, float))]
    mfu = [r["mfu"] for r in timed if isinstance(r.get("mfu"), (int, float))]
    peak = max((r["memory_gib"] for r in rows if isinstance(r.get("memory_gib"), (int, float))), default=None)
    from shared.provenance import tree_commit

    return {
        "benchmark": "gpu_trainer_run", "commit": tree_commit(), "config": config, "overrides": extra,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "steps": len(rows), "loss_first": rows[0].get("loss"), "loss_last": rows[-1].get("loss"),
        "tokens_per_step": rows[0]["tokens"], "tokens_per_s": statistics.median(tps) if tps else None,
        "mfu": statistics.median(mfu) if mfu else None,
        "router_maxvio_last": rows[-1].get("router/maxvio"),
        "peak_memory_gib": peak, "plan_gib": plan_gib,
        "peak_over_plan": peak / plan_gib if peak and plan_gib else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help=f"recipe (default {GPU_RECIPE} on CUDA, {CPU_RECIPE} on CPU)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default 6 on CUDA, 3 on CPU)")
    p.add_argument("--grad-accum", type=int, default=2, help="micro-batches per step")
    p.add_argument("--run-root", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                   help="where the run (and its final checkpoint) is written, then deleted")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    config = args.config or (GPU_RECIPE if cuda else CPU_RECIPE)
    steps = args.steps or (6 if cuda else 3)
    root = Path(tempfile.mkdtemp(prefix="moelab-trainer-run-", dir=args.run_root))
    extra = overrides(steps, args.grad_accum, str(root), cuda)
    from shared.config import load_config
    from shared.plan.memory import GIB, plan_memory

    plan_gib = plan_memory(load_config(str(REPO / config), extra)).total / GIB
    cmd = [sys.executable, "-m", "moelab.cli", "train", config, *extra, "--no-ray"]
    print("$ " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        if proc.returncode != 0:
            raise SystemExit(f"moelab train exited {proc.returncode}")
        result = summarize_run(root / "gpu-trainer-run" / "metrics.jsonl", plan_gib, config, extra)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    line = json.dumps(result)
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(args.out)
    print(line)


if __name__ == "__main__":
    main()
