"""Sanity ablation with a known answer: clean text against the same text with 30% planted garbage.

Arm `clean` is the demo corpus's Wikipedia prose; arm `garbage` is the same documents with the last
30% of every document's characters replaced by planted garbage of the same length (web
boilerplate, one line repeated, product spam). Same shared tokenizer, same token budget, same tiny
proxy, 3 seeds each, run by `moelab ablate`'s own code (cluster.ablation) on a local Ray. The
known answer: the clean arm must win, with the 95% paired-bootstrap interval excluding zero, on
bits per byte of the prose reference set and on the task suite; held-out eval loss (nats per
token of the shared tokenizer, on held-out clean Wikipedia documents) is reported beside them.
The "peer" of this benchmark is that known answer: ratios are garbage / clean for BPB (> 1: clean
better) and clean / garbage for task accuracy.

    .venv/bin/python benchmarks/ablation.py            # 3 seeds, 120 steps x 1,024 tokens (a few minutes idle)
    .venv/bin/python benchmarks/ablation.py --quick    # 2 seeds, 6 steps, tiny model (a smoke test)

The last line is one JSON object with bpb_gap (garbage − clean, mean over seeds), bpb_ci_low,
task_gap (clean − garbage accuracy), task_ci_low, seconds, and `passed`; a full run also writes it
to benchmarks/results/ablation.json (or `--out`) with the command and the load average before and
after, since `seconds` is wall-clock on whatever else the machine was running; the exit code is 1 when the
clean arm does not win on BPB with an interval excluding zero (the task verdict is reported, since
at CPU scale accuracy can sit at chance: then the continuous metrics are the ones that separate).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

GARBAGE_FRACTION = 0.3
BOILERPLATE = ("Home | About us | Contact | Privacy policy | Terms of use | Cookie settings\n"
               "Subscribe to our newsletter! Click here to sign up. All rights reserved.\n")
SPAM = ("BEST PRICES!!! Buy cheap watches now, free shipping, limited offer, 90% off, "
        "order today www.cheap-deals-online.example click click click ")


def planted_garbage(rng: random.Random, n_chars: int) -> str:
    """`n_chars` characters of one kind of garbage: boilerplate, a repeated line, or spam."""
    kind = rng.randrange(3)
    if kind == 0:
        unit = BOILERPLATE
    elif kind == 1:
        unit = f"Posted by admin on {rng.randint(1, 28)} March {rng.randint(2001, 2023)} | Reply | Share\n"
    else:
        unit = SPAM
    return (unit * (n_chars // len(unit) + 1))[:n_chars]


def write_arms(root: Path, held_out_every: int = 20) -> dict[str, Path]:
    """clean.jsonl, garbage.jsonl (30% of each document's characters replaced) and held.jsonl."""
    rng = random.Random(0)
    docs = [json.loads(line) for line in gzip.open(ROOT / "data/demo/wiki.jsonl.gz", "rt", encoding="utf-8")]
    paths = {name: root / f"{name}.jsonl" for name in ("clean", "garbage", "held")}
    root.mkdir(parents=True, exist_ok=True)
    with paths["clean"].open("w") as clean, paths["garbage"].open("w") as garbage, paths["held"].open("w") as held:
        for i, d in enumerate(docs):
            rec = {"id": d["id"], "source": "wiki", "text": d["text"]}
            if i % held_out_every == 0:
                held.write(json.dumps(rec) + "\n")
                continue
            clean.write(json.dumps(rec) + "\n")
            cut = int(len(d["text"]) * (1 - GARBAGE_FRACTION))
            noisy = d["text"][:cut] + planted_garbage(rng, len(d["text"]) - cut)
            garbage.write(json.dumps({**rec, "text": noisy}) + "\n")
    return paths


def config(root: Path, quick: bool, seeds: int, steps: int):
    from shared.config import load_config

    files = write_arms(root / "corpus")
    shape = (["model.d_model=32", "model.n_layers=2", "train.seq_len=64", "train.micro_batch_size=4",
              "train.grad_accum=1", f"train.steps={steps}", "ablation.reference_texts=8", "ablation.task_items=16"]
             if quick else ["train.seq_len=128", "train.micro_batch_size=1", "train.grad_accum=8", f"train.steps={steps}"])
    return load_config(ROOT / "configs" / "tiny.yaml", [
        "name=sanity-ablation", "mixture.documents=[]", "mixture.eval_documents=[]", "mixture.rates={}",
        "train.eval_every=100000", "train.eval_batches=16", "train.checkpoint_every=100000",
        "optim.warmup_steps=5", "tracker.mode=disabled",
        f"ablation={{baseline: clean, seeds: {seeds}, out_dir: {root / 'out'}, eval_documents: [{files['held']}], "
        f"reference_sets: [prose], tokenizer_docs_per_arm: 400, cpus_per_run: 1, "
        f"arms: [{{name: clean, documents: [{files['clean']}]}}, {{name: garbage, documents: [{files['garbage']}]}}]}}",
        *shape,
    ])


def _task_metric(report: dict) -> str | None:
    """The prose task accuracy when the suite ran (the mean over tasks is not a paired metric here)."""
    names = [m for m in report["metrics"] if m.startswith("task/") and m.endswith("/acc")]
    prose = [m for m in names if "prose" in m]
    return (prose or names or [None])[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 6 steps, a smaller model (smoke test)")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--work", type=Path, default=None, help="Working folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="Also write the final JSON here")
    args = ap.parse_args(argv)
    seeds = args.seeds or (2 if args.quick else 3)
    steps = args.steps or (6 if args.quick else 120)

    import ray

    from cluster.ablation import run_ablation

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ablation-bench-") as tmp:
        work = args.work or Path(tmp)
        cfg = config(work, args.quick, seeds, steps)
        if not ray.is_initialized():
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        report = run_ablation(cfg, log=lambda line: print(line, flush=True))
    seconds = time.perf_counter() - t0
    comp = report["comparisons"]["garbage"]
    bpb = comp.get("bpb/prose", {})
    task = _task_metric(report)
    tc = comp.get(task, {}) if task else {}
    # signed so that > 0 means the clean arm is better
    bpb_gap, bpb_ci_low = bpb.get("mean"), bpb.get("ci_low")
    task_gap = -tc["mean"] if "mean" in tc else None
    task_ci_low = -tc["ci_high"] if "ci_high" in tc else None
    clean_bpb = report["arms"]["clean"]["metrics"].get("bpb/prose", {}).get("mean")
    for line in report["verdicts"]:
        print(line)
    if clean_bpb:
        print(f"ratio garbage/clean BPB on prose: {(clean_bpb + bpb_gap) / clean_bpb:.4f} (> 1: clean better)")
    passed = bpb_ci_low is not None and bpb_ci_low > 0
    result = {"bpb_gap": bpb_gap, "bpb_ci_low": bpb_ci_low, "task_metric": task, "task_gap": task_gap,
              "task_ci_low": task_ci_low, "task_separates": task_ci_low is not None and task_ci_low > 0,
              "eval_loss_gap": comp.get("eval/loss", {}).get("mean"),
              "eval_loss_ci_low": comp.get("eval/loss", {}).get("ci_low"),
              # metrics whose interval excludes zero in the clean arm's favour
              "separating_metrics": sorted(m for m, c in comp.items() if c.get("excludes_zero")
                                           and (c["mean"] < 0) == c["higher_is_better"]),
              "seeds": seeds, "steps": steps, "budget_tokens": report["budget_tokens"], "quick": args.quick,
              "verdicts": report["verdicts"], "seconds": round(seconds, 1), "passed": passed,
              # `seconds` is wall-clock: read it against the machine's load while it ran
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
              "command": " ".join([".venv/bin/python", "benchmarks/ablation.py", *(argv if argv is not None else sys.argv[1:])])}
    out = args.out or (None if args.quick else RESULTS / "ablation.json")
    if out is not None:
        from shared.data.atomic import atomic_write_json

        atomic_write_json(out, result)
    print(json.dumps(result))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
