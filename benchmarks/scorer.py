"""Scorer benchmark: the early-exit cascade vs the Judge alone vs the Probe alone, and 1 vs 2 CPU actors.

All measured in one run on the same documents (prose from pydoc_data, code from the stdlib):
1. label a sample with the heuristic stand-in oracle, train the heads, calibrate (τ_keep, τ_drop)
   on a third set of unlabelled documents;
2. score the held-back documents in-process three ways, timing each and counting backbone FLOPs
   (neither the heads nor the thresholds saw them, so `keeper_loss` is what a new corpus gets);
3. score the same documents as Parquet shards on Ray Data with a pool of 1 and of 2 actors.
`ratio` = cascade docs/s ÷ Judge-only docs/s (> 1: the cascade is faster). `flops_saved` is the
fraction of backbone FLOPs the cascade skips at the calibrated τ_drop; `keeper_loss` the fraction
of the Judge-only keepers the cascade dropped. The last line is one JSON object.

    .venv/bin/python benchmarks/scorer.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/ holds a tokenize.py that would shadow the standard library's tokenize module
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (fewer documents and epochs)")
    ap.add_argument("--docs", type=int, default=0, help="documents per kind (default 300, quick 60)")
    args = ap.parse_args()
    n = args.docs or (60 if args.quick else 300)

    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from services.scorer import pipeline
    from services.scorer.cascade import CascadeScorer
    from services.scorer.sample_docs import python_docs
    from services.scorer.scoring import run_scoring
    from shared.config import ExperimentConfig

    docs = python_docs(n, n, seed=11)
    labelled, held = docs[: n // 2] + docs[n : n + n // 2], docs[n // 2 : n] + docs[n + n // 2 :]
    # Unlabelled calibration documents, none of the above: enough for ≥ 99 keepers per rubric at
    # the default 1% keeper loss (τ_drop skips nothing with fewer), fewer in --quick.
    seen = {d["text"] for d in docs}
    fresh = [d for d in python_docs(738, 900, seed=12) if d["text"] not in seen]
    n_cal = {"web": 100, "code": 100} if args.quick else {"web": 400, "code": 250}
    calib = [{**d, "id": f"cal-{d['id']}"} for kind, k in n_cal.items() for d in [x for x in fresh if x["kind"] == kind][:k]]
    tmp = Path(tempfile.mkdtemp(prefix="bench-scorer-"))
    cfg = ExperimentConfig()
    cfg.tracker.mode = "disabled"
    cfg.scorer.out_dir = str(tmp / "out")
    h = cfg.scorer.heads
    h.max_tokens, h.judge_dim, h.judge_heads = 128, 64, 4
    h.max_epochs, h.patience = (8, 3) if args.quick else (40, 6)
    cfg.scorer.oracle.sample_size = len(labelled)
    print(f"oracle=heuristic (stand-in); labelling {len(labelled)} documents, calibrating on {len(calib)}, "
          f"scoring {len(held)}", flush=True)
    pipeline.label_stage(cfg, docs=labelled)
    pipeline.train_stage(cfg)
    cal = pipeline.calibrate_stage(cfg, docs=calib)
    print(f"calibration keepers per rubric {cal['calibration']['keepers_per_rubric']}, promised keeper loss "
          f"{cal['calibration']['expected_keeper_loss']} (90%: {cal['calibration']['keeper_loss_p90']})", flush=True)

    scorer = CascadeScorer.load(cfg.scorer.out_dir, cfg.scorer)
    texts, kinds, sources = [d["text"] for d in held], [d["kind"] for d in held], [d["source"] for d in held]
    scorer.score(texts[:8], kinds[:8], sources[:8])  # warm-up
    res, speed, flops = {}, {}, {}
    for mode in ("cascade", "judge", "probe"):
        scorer.bb.reset_counters()
        t0 = time.perf_counter()
        res[mode] = scorer.score(texts, kinds, sources, mode=mode)
        speed[mode] = len(texts) / (time.perf_counter() - t0)
        flops[mode] = sum(scorer.bb.layer_flops)
        print(f"{mode:8s} {speed[mode]:8.1f} docs/s  backbone {flops[mode] / 1e9:8.1f} GFLOP", flush=True)
    jk, ck = res["judge"]["keep"], res["cascade"]["keep"]
    keeper_loss = float((jk & ~ck).sum() / max(1, jk.sum()))
    flops_saved = 1.0 - flops["cascade"] / flops["judge"]

    shards = []
    for s in range(4):
        part = held[s::4]
        path = tmp / "in" / f"part-{s}.parquet"
        path.parent.mkdir(exist_ok=True)
        pq.write_table(pa.table({k: [d[k] for d in part] for k in ("id", "text", "source")}), path)
        shards.append(str(path))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    actors = {}
    for pool in (1, 2):
        cfg.scorer.scoring.actors_max = pool  # max first: the validator checks min <= max on assignment
        cfg.scorer.scoring.actors_min = pool
        cfg.scorer.out_dir = str(tmp / "out")
        for f in (tmp / "out" / "scores").glob("*.parquet") if (tmp / "out" / "scores").exists() else []:
            f.unlink()
        rep = run_scoring(cfg, shards, progress=False)
        actors[pool] = rep["docs_per_s"]
        print(f"ray data, {pool} actor(s) x {cfg.scorer.scoring.actor_cpus} CPU: {actors[pool]:.1f} docs/s "
              f"(incl. actor start-up)", flush=True)
    ray.shutdown()
    print(f"cascade / judge-only speed: {speed['cascade'] / speed['judge']:.2f}x; FLOPs saved {flops_saved:.1%}; "
          f"keeper loss {keeper_loss:.1%}; 2 vs 1 actors: {actors[2] / actors[1]:.2f}x")
    print(json.dumps({
        "ratio": speed["cascade"] / speed["judge"],
        "docs_per_s_cascade": speed["cascade"], "docs_per_s_judge": speed["judge"], "docs_per_s_probe": speed["probe"],
        "flops_saved": flops_saved, "keeper_loss": keeper_loss,
        "judge_passes_skipped": float(res["cascade"]["judge_skipped"].mean()),
        "calibration_flops_saved": cal["compute"]["flops_saved"],
        "promised_keeper_loss": cal["calibration"]["expected_keeper_loss"],
        "promised_keeper_loss_p90": cal["calibration"]["keeper_loss_p90"],
        "actors_1_docs_per_s": actors[1], "actors_2_docs_per_s": actors[2], "actor_scaling": actors[2] / actors[1],
        "docs": len(held), "oracle": "heuristic (stand-in)", "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
