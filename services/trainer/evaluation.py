"""Held-out evaluation during training: LM loss and MaxVio_global on the same batches every time.

Why the same batches: the loader is rewound to its start before each evaluation, so two
evaluations differ only by the weights, and a curve of `eval/loss` is a curve of the model. The
loss is averaged over ranks and the router loads summed over every batch and rank before MaxVio
(Wang et al. 2024, Loss-Free Balancing: MaxVio_global = (max_i load_i − mean load) / mean load
over the whole evaluation set), so N processes report what one process would.
"""

from __future__ import annotations

import torch

from services.trainer.parallel import mean_over_ranks
from services.trainer.router_stats import RouterTally


@torch.no_grad()
def evaluate(model, loader, batches: int, device: torch.device) -> dict[str, float]:
    """Mean LM loss over the first `batches` held-out batches (the same ones every time), and
    MaxVio_global: MaxVio of each MoE layer's loads summed over all of them and every rank."""
    loader.load_state_dict({"step": 0})
    model.eval()
    losses = []
    tally = RouterTally()
    for _ in range(batches):
        batch = next(loader)
        _, aux = model(batch.inputs_BT.to(device), batch.targets_BT.to(device))
        losses.append(float(aux["lm_loss"]))
        tally.add(aux["layers"])
    model.train()
    tally.reduce()
    out = {"eval/loss": mean_over_ranks(sum(losses) / len(losses), device)}
    stats = tally.layer_stats()
    if stats:
        out["eval/maxvio_global"] = max(s["maxvio"] for s in stats.values())
        out.update({f"eval/maxvio_global/layer{i}": s["maxvio"] for i, s in stats.items()})
    return out
