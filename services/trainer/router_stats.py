"""Router statistics of the global batch: every micro-batch of every rank, reduced before use.

MaxVio, dead experts, router entropy and the health rules all decide something (a warning, a
stop, a reading of the dashboard), so they are computed from loads summed over the step's
micro-batches and all-reduced over every data-parallel rank — the batch the bias update sees —
never from one rank's last micro-batch, whose small sample makes MaxVio look worse than it is
and can hide an expert that another rank starves. MaxVio_global (Wang et al. 2024, "Auxiliary-
Loss-Free Load Balancing", arXiv:2408.15664) is the same measure over a whole held-out set.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import Tensor

from shared.model.stats import max_violation


class RouterTally:
    """Per-layer expert loads and token-weighted router entropy, accumulated then reduced."""

    def __init__(self) -> None:
        self.loads: dict[int, Tensor] = {}
        self.entropy_sum: dict[int, Tensor] = {}
        self.tokens: dict[int, Tensor] = {}
        self.last: dict[int, dict[str, Tensor]] = {}

    def add(self, layers: dict[int, dict[str, Tensor]]) -> None:
        """One forward's router stats (`aux["layers"]`)."""
        for i, s in layers.items():
            load = s["tokens_per_expert"].detach().double()
            n_tokens = load.sum()  # T·K assignments: proportional to the tokens, which is all a weighted mean needs
            self.loads[i] = self.loads.get(i, 0) + load
            self.entropy_sum[i] = self.entropy_sum.get(i, 0) + s["router_entropy"].detach().double() * n_tokens
            self.tokens[i] = self.tokens.get(i, 0) + n_tokens
            self.last[i] = s

    def reduce(self) -> None:
        """Sum every rank's tallies (one all-reduce); a no-op in one process."""
        if not self.loads or not dist.is_initialized() or dist.get_world_size() == 1:
            return
        layers = sorted(self.loads)
        device = self.loads[layers[0]].device
        flat = torch.cat([torch.cat([self.loads[i], self.entropy_sum[i].reshape(1), self.tokens[i].reshape(1)])
                          for i in layers]).to(device)
        dist.all_reduce(flat)
        offset = 0
        for i in layers:
            n = self.loads[i].numel()
            self.loads[i] = flat[offset:offset + n]
            self.entropy_sum[i], self.tokens[i] = flat[offset + n], flat[offset + n + 1]
            offset += n + 2

    def layer_stats(self) -> dict[int, dict]:
        """{layer: maxvio, entropy (nats), dead experts, tokens_per_expert} of the reduced batch."""
        out = {}
        for i, load in self.loads.items():
            out[i] = {"maxvio": float(max_violation(load)), "entropy": float(self.entropy_sum[i] / self.tokens[i].clamp_min(1)),
                      "dead": int((load == 0).sum()), "tokens_per_expert": load.tolist()}
        return out


def router_metrics(stats: dict[int, dict], last: dict[int, dict[str, Tensor]], top_k: int | None = None) -> dict[str, float]:
    """Tracker scalars: the worst layer's MaxVio, total dead experts, mean entropy, per-layer MaxVio and bias range;
    with `top_k`, also `router/maxvio_chance`, what uniform random routing of the step's tokens reads in one layer:
    a step MaxVio below it is feedback (a bias chasing each micro-batch), not a balanced router."""
    if not stats:
        return {}
    metrics = {
        "router/maxvio": max(s["maxvio"] for s in stats.values()),
        "router/dead_experts": sum(s["dead"] for s in stats.values()),
        "router/entropy": sum(s["entropy"] for s in stats.values()) / len(stats),
    }
    for i, s in stats.items():
        metrics[f"router/maxvio/layer{i}"] = s["maxvio"]
        if i in last:
            metrics[f"router/bias_max/layer{i}"] = float(last[i]["bias_max"])
            metrics[f"router/bias_min/layer{i}"] = float(last[i]["bias_min"])
    if top_k is not None:
        load = next(iter(stats.values()))["tokens_per_expert"]
        metrics["router/maxvio_chance"] = chance_maxvio(round(sum(load) / top_k), len(load), top_k)
    return metrics


@functools.lru_cache(maxsize=64)
def chance_maxvio(tokens: int, experts: int, top_k: int) -> float:
    """`uniform_routing_maxvio`, computed once per shape (a step's token count rarely changes)."""
    return uniform_routing_maxvio(tokens, experts, top_k)


def health_inputs(stats: dict[int, dict]) -> dict[int, dict]:
    """What RouterHealthMonitor.observe reads, from the reduced statistics."""
    return {i: {"maxvio": s["maxvio"], "entropy": s["entropy"], "tokens_per_expert": s["tokens_per_expert"]}
            for i, s in stats.items()}


def uniform_routing_maxvio(tokens: int, experts: int, top_k: int, draws: int = 200, seed: int = 0) -> float:
    """Mean MaxVio of `tokens` tokens each sent to `top_k` distinct experts chosen uniformly at random.

    The sampling floor of a MaxVio measured over that many tokens: a perfectly balanced router
    reads about this much, so a figure near it says no more than "balanced within the sample"."""
    gen = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(draws):
        idx = torch.rand(tokens, experts, generator=gen).topk(top_k, dim=1).indices
        total += float(max_violation(torch.bincount(idx.reshape(-1), minlength=experts)))
    return total / draws
