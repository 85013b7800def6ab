"""Score a finished run's last checkpoint on its held-out stream shuffled with several seeds.

Why: the eval loss of one run is measured on the first `train.eval_batches` batches of one
shuffle of the held-out documents. Scoring the same model on other shuffles shows how much of a
difference between two runs is the eval set rather than the models (the trainer once shuffled the
held-out stream with `train.seed`, so two seeds were scored on different tokens).

    .venv/bin/python scripts/eval_streams.py RUN_DIR [--seeds 0,1] [--batches 8,32]

RUN_DIR is a run folder with `config.yaml` and `checkpoints/` (e.g. runs/tiny/tiny). Prints one
line per (seed, batches) and, last, one JSON object with the same figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def final_model(run: Path):
    """The model of `run`'s newest checkpoint, on CPU."""
    import os
    import tempfile

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from services.trainer.checkpoint import CheckpointManager
    from shared.config import load_config
    from shared.model.transformer import MoETransformer

    cfg = load_config(run / "config.yaml")
    latest = CheckpointManager(run / "checkpoints").latest()
    if latest is None:
        raise SystemExit(f"{run}: no checkpoint under {run / 'checkpoints'}")
    fd, flat = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    try:
        dcp_to_torch_save(str(latest), flat)
        state = torch.load(flat, weights_only=False)
    finally:
        os.remove(flat)
    model = MoETransformer(cfg.model)
    model.load_state_dict(state["model"])
    return cfg, model


def score(run: Path, seeds: list[int], batches: list[int]) -> list[dict]:
    import torch

    from services.trainer.data import eval_config, with_parquet_documents
    from services.trainer.evaluation import evaluate
    from shared.data.prepare import make_loader

    cfg, model = final_model(run)
    held_out = eval_config(with_parquet_documents(cfg))
    if held_out is None:
        raise SystemExit(f"{run}: the run's config has no mixture.eval_documents")
    rows = []
    for seed in seeds:
        loader = make_loader(held_out.model_copy(update={"train": held_out.train.model_copy(update={"seed": seed})}))
        for n in batches:
            r = evaluate(model, loader, n, torch.device("cpu"))
            rows.append({"seed": seed, "batches": n, "loss": r["eval/loss"], "maxvio_global": r.get("eval/maxvio_global")})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--seeds", default="0,1", help="shuffle seeds of the held-out stream (comma-separated)")
    p.add_argument("--batches", default="8,32", help="numbers of batches to score (comma-separated)")
    args = p.parse_args(argv)
    rows = score(args.run, [int(s) for s in args.seeds.split(",")], [int(b) for b in args.batches.split(",")])
    for r in rows:
        mv = "-" if r["maxvio_global"] is None else f"{r['maxvio_global']:.2f}"
        print(f"held-out stream seed {r['seed']}, {r['batches']} batches: loss {r['loss']:.4f}, MaxVio_global {mv}")
    print(json.dumps({"run": str(args.run), "streams": rows}))
    return rows


if __name__ == "__main__":
    main()
