"""Score a finished run's last checkpoint on its held-out stream shuffled with several seeds.

Why: the eval loss of one run is measured on the first `train.eval_batches` batches of one
shuffle of the held-out documents. Scoring the same model on other shuffles shows how much of a
difference between two runs is the eval set rather than the models (the trainer once shuffled the
held-out stream with `train.seed`, so two seeds were scored on different tokens).

    .venv/bin/python scripts/eval_streams.py RUN_DIR [--seeds 0,1] [--batches 8,32] [--routing]
        [--bias live,average] [--train-stream]

RUN_DIR is a run folder with `config.yaml` and `checkpoints/` (e.g. runs/tiny/tiny). Prints one
line per (stream, seed, batches, eval bias) and, last, one JSON object with the same figures.
Each line gives MaxVio_global beside what uniform random top-k routing of as many tokens reads
(its sampling floor). `--bias` scores the frozen router with the live bias and/or its average
(`model.moe.balance.eval_bias`; default: the run's own). `--train-stream` also scores the
training mixture's stream, for a run whose held-out documents are another domain. `--routing` adds, per
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


def use_eval_bias(model, choice: str) -> None:
    """Route `model` in eval mode with the live bias or its average (`balance.eval_bias`)."""
    for layer in model.moe_layers():
        cfg = layer.router.cfg
        layer.router.cfg = cfg.model_copy(update={"balance": cfg.balance.model_copy(update={"eval_bias": choice})})


def score(model, stream_cfg, seeds: list[int], batches: list[int], biases: list[str], stream: str = "held_out") -> list[dict]:
    import torch

    from services.trainer.evaluation import evaluate
    from services.trainer.router_stats import uniform_routing_maxvio
    from shared.data.prepare import make_loader

    moe = stream_cfg.model.moe
    per_batch = stream_cfg.train.micro_batch_size * stream_cfg.train.seq_len
    rows = []
    for seed in seeds:
        loader = make_loader(stream_cfg.model_copy(update={"train": stream_cfg.train.model_copy(update={"seed": seed})}))
        for n in batches:
            floor = uniform_routing_maxvio(n * per_batch, moe.n_routed_experts, moe.top_k) if model.moe_layers() else None
            for bias in biases:
                use_eval_bias(model, bias)
                r = evaluate(model, loader, n, torch.device("cpu"))
                rows.append({"stream": stream, "seed": seed, "batches": n, "tokens": n * per_batch, "bias": bias,
                             "loss": r["eval/loss"], "maxvio_global": r.get("eval/maxvio_global"),
                             "maxvio_global_per_layer": [v for k, v in r.items() if k.startswith("eval/maxvio_global/")],
                             "uniform_floor": floor})
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
        idx_TK = (scores_TE + moe.router.selection_bias()).topk(moe.cfg.top_k, dim=-1).indices
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
    p.add_argument("--bias", default=None, help="eval bias(es) to route with: live, average or both "
                   "(comma-separated; default: the run's model.moe.balance.eval_bias)")
    p.add_argument("--train-stream", action="store_true", help="also score the training mixture's stream")
    args = p.parse_args(argv)
    cfg, model = final_model(args.run)
    held_out = held_out_config(args.run, cfg)
    seeds, batches = [int(s) for s in args.seeds.split(",")], [int(b) for b in args.batches.split(",")]
    biases = (args.bias or cfg.model.moe.balance.eval_bias).split(",")
    unknown = sorted(set(biases) - {"live", "average"})
    if unknown:
        raise SystemExit(f"--bias: unknown choice(s) {unknown}; use live, average or both")
    rows = score(model, held_out, seeds, batches, biases)
    if args.train_stream:
        from services.trainer.data import with_parquet_documents

        rows += score(model, with_parquet_documents(cfg), seeds, batches, biases, stream="train")
    for r in rows:
        mv = "-" if r["maxvio_global"] is None else (
            f"{r['maxvio_global']:.2f} (layers {' / '.join(f'{v:.2f}' for v in r['maxvio_global_per_layer'])}; "
            f"uniform routing of {r['tokens']:,} tokens: {r['uniform_floor']:.3f})")
        print(f"{r['stream']} stream seed {r['seed']}, {r['batches']} batches, {r['bias']} bias: "
              f"loss {r['loss']:.4f}, MaxVio_global {mv}")
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
