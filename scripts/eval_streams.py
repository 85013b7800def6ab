"""Score a finished run's last checkpoint on its held-out stream shuffled with several seeds.

Why: the eval loss of one run is measured on the first `train.eval_batches` batches of one
shuffle of the held-out documents. Scoring the same model on other shuffles shows how much of a
difference between two runs is the eval set rather than the models (the trainer once shuffled the
held-out stream with `train.seed`, so two seeds were scored on different tokens).

    .venv/bin/python scripts/eval_streams.py RUN_DIR [--seeds 0,1] [--batches 8,32] [--routing]

RUN_DIR is a run folder with `config.yaml` and `checkpoints/` (e.g. runs/tiny/tiny). Prints one
line per (seed, batches) and, last, one JSON object with the same figures. `--routing` adds, per
MoE layer on the first held-out batch, how much the router's scores vary across tokens and across
experts, the busiest expert's share of tokens and the layer's bungee scalar: a router whose
scores do not vary across tokens sends every token to the same experts, whatever the bias does.
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


def held_out_config(run: Path, cfg):
    """The run's held-out stream config (raw JSONL documents resolved to Parquet)."""
    from services.trainer.data import eval_config, with_parquet_documents

    held_out = eval_config(with_parquet_documents(cfg))
    if held_out is None:
        raise SystemExit(f"{run}: the run's config has no mixture.eval_documents")
    return held_out


def score(model, held_out, seeds: list[int], batches: list[int]) -> list[dict]:
    import torch

    from services.trainer.evaluation import evaluate
    from shared.data.prepare import make_loader

    rows = []
    for seed in seeds:
        loader = make_loader(held_out.model_copy(update={"train": held_out.train.model_copy(update={"seed": seed})}))
        for n in batches:
            r = evaluate(model, loader, n, torch.device("cpu"))
            rows.append({"seed": seed, "batches": n, "loss": r["eval/loss"], "maxvio_global": r.get("eval/maxvio_global")})
    return rows


def routing(model, batch) -> list[dict]:
    """Per MoE layer on `batch`: score spread across tokens and across experts' means, the busiest
    expert's share of the tokens (top-k with the bias, as training routes) and the bungee."""
    import torch

    seen: dict[int, torch.Tensor] = {}
    hooks = [layer.ffn.router.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out.scores_TE))
             for i, layer in enumerate(model.layers) if hasattr(layer.ffn, "router")]
    model.eval()
    with torch.no_grad():
        model(batch.inputs_BT)
    for h in hooks:
        h.remove()
    rows = []
    for i, scores_TE in seen.items():
        moe = model.layers[i].ffn
        idx_TK = (scores_TE + moe.router.expert_bias_E).topk(moe.cfg.top_k, dim=-1).indices
        share = torch.bincount(idx_TK.reshape(-1), minlength=scores_TE.shape[1]).max().item() / idx_TK.shape[0]
        rows.append({"layer": i, "score_std_tokens": scores_TE.std(0).mean().item(),
                     "score_std_experts": scores_TE.mean(0).std().item(), "busiest_expert_share": share,
                     "bungee": None if moe.bungee is None else moe.bungee.item()})
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--seeds", default="0,1", help="shuffle seeds of the held-out stream (comma-separated)")
    p.add_argument("--batches", default="8,32", help="numbers of batches to score (comma-separated)")
    p.add_argument("--routing", action="store_true", help="also each MoE layer's router score spread and bungee")
    args = p.parse_args(argv)
    cfg, model = final_model(args.run)
    held_out = held_out_config(args.run, cfg)
    rows = score(model, held_out, [int(s) for s in args.seeds.split(",")], [int(b) for b in args.batches.split(",")])
    for r in rows:
        mv = "-" if r["maxvio_global"] is None else f"{r['maxvio_global']:.2f}"
        print(f"held-out stream seed {r['seed']}, {r['batches']} batches: loss {r['loss']:.4f}, MaxVio_global {mv}")
    out = {"run": str(args.run), "streams": rows}
    if args.routing:
        from shared.data.prepare import make_loader

        out["routing"] = routing(model, next(make_loader(held_out)))
        for r in out["routing"]:
            bungee = "-" if r["bungee"] is None else f"{r['bungee']:.3f}"
            print(f"layer {r['layer']}: score std across tokens {r['score_std_tokens']:.4f}, across experts "
                  f"{r['score_std_experts']:.4f}; busiest expert {r['busiest_expert_share']:.0%} of tokens; bungee {bungee}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
