"""The frozen router at every held-out evaluation: `router_frozen/*`, beside the floor of the same tokens.

Why here: the step MaxVio is held down by a bias that moves after every micro-batch; what the model
would show deployed is its MaxVio frozen, in eval mode with the eval-time bias, over tokens it never
trained on, judged against what a router balanced in expectation reads on those very tokens (the
block-bootstrap floor, `shared.model.router_floor`). The evaluation already routes the held-out
batches in eval mode, so the figures cost no extra forward: a hook keeps each MoE router's choices,
and after the batches their loads per document give the floor. `router_frozen/maxvio_worst` equals
`eval/maxvio_global`; what this adds is the per-layer figures under the dashboard's names and the floor.

Multi-rank: each rank routes its own rows of each batch (rank r holds global rows r, r + W, …);
the rows, sources and choices are gathered and put back in global order, so documents that run on
from one sequence into the next are found as one process would find them, and every rank computes
the same figures. The floor needs documents to resample: below `MIN_FLOOR_DOCUMENTS` it is left out
(with a warning naming the count, once per run from the trainer's eval) rather than reported from a handful of blocks, where a bootstrap
reads near 0. Raise `train.eval_batches` for a larger sample (≥ 131k tokens is what the frozen
figures elsewhere use); the cost is the evaluation's own forward passes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor, nn

from shared.model.router_floor import block_bootstrap_floor, document_blocks
from shared.model.router_frozen import moe_routers
from shared.model.stats import max_violation

log = logging.getLogger(__name__)

MIN_FLOOR_DOCUMENTS = 8
FLOOR_DRAWS = 200  # the floor's mean over draws is stable to ~1% at this count; bounded cost per eval


@dataclass
class RoutingTap:
    """Within `with`, keeps every MoE router's chosen experts and each batch's rows and sources."""

    model: nn.Module
    inputs: list[Tensor] = field(default_factory=list)
    sources: list[tuple[str, ...]] = field(default_factory=list)
    choices: dict[int, list[Tensor]] = field(default_factory=dict)
    n_experts: int = 0

    def __enter__(self) -> RoutingTap:
        routers = moe_routers(self.model)
        self.choices = {i: [] for i in routers}
        self.n_experts = next((r.cfg.n_routed_experts for r in routers.values()), 0)
        self._hooks = [r.register_forward_hook(lambda m, a, out, i=i: self.choices[i].append(out.idx_TK.detach().to("cpu", torch.int32)))
                       for i, r in routers.items()]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()

    def batch(self, inputs_BT: Tensor, sources_B: tuple[str, ...]) -> None:
        """Record the rows and sources of the batch just routed."""
        self.inputs.append(inputs_BT.detach().cpu())
        self.sources.append(tuple(sources_B))


def _global_order(tap: RoutingTap) -> tuple[Tensor, list[str], dict[int, Tensor]]:
    """Rows (N, T), sources and per-layer choices (N·T, K) of every rank, in global stream order."""
    mine = (tap.inputs, tap.sources, {i: c for i, c in tap.choices.items()})
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        ranks = [mine]
    else:
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
    rows, sources, choices = [], [], {i: [] for i in tap.choices}
    for b in range(len(tap.inputs)):
        per_rank = [(r[0][b], r[1][b], {i: c[b] for i, c in r[2].items()}) for r in ranks]
        B, T = per_rank[0][0].shape
        for row in range(B):  # global row row·W + r is rank r's row `row`
            for inputs, srcs, chosen in per_rank:
                rows.append(inputs[row])
                sources.append(srcs[row])
                for i in choices:
                    choices[i].append(chosen[i].view(B, T, -1)[row])
    return torch.stack(rows), sources, {i: torch.cat(c).long() for i, c in choices.items()}


def frozen_router_metrics(tap: RoutingTap, eos_id: int, *, warn_no_floor: bool = True) -> dict[str, float]:
    """`router_frozen/maxvio_worst`, `router_frozen/maxvio/layer<i>` and, with enough documents,
    `router_frozen/floor` (the worst layer's block-bootstrap floor) from what the tap saw.

    `warn_no_floor=False` leaves the floor out silently: a caller that evaluates the same batches
    every time (the trainer's eval) says so once, not at every evaluation."""
    if not tap.inputs or not tap.choices:
        return {}
    inputs_NT, sources, choices = _global_order(tap)
    block_NT, block_sources = document_blocks(inputs_NT, sources, eos_id)
    block_T, n_blocks, n_experts = block_NT.reshape(-1), len(block_sources), tap.n_experts
    loads = []
    for idx_TK in choices.values():
        flat = block_T[:, None].expand_as(idx_TK) * n_experts + idx_TK
        loads.append(torch.bincount(flat.reshape(-1), minlength=n_blocks * n_experts).view(n_blocks, n_experts).double())
    per_layer = {i: float(max_violation(loads_BE.sum(0))) for i, loads_BE in zip(choices, loads, strict=True)}
    out = {"router_frozen/maxvio_worst": max(per_layer.values())}
    out.update({f"router_frozen/maxvio/layer{i}": v for i, v in per_layer.items()})
    if n_blocks < MIN_FLOOR_DOCUMENTS:
        if warn_no_floor:
            log.warning("router_frozen/floor not reported: the eval's %d tokens hold %d documents, fewer than %d "
                        "to resample (raise train.eval_batches)", block_T.numel(), n_blocks, MIN_FLOOR_DOCUMENTS)
        return out
    ids = {s: k for k, s in enumerate(dict.fromkeys(block_sources))}
    floor = block_bootstrap_floor(torch.stack(loads), [ids[s] for s in block_sources], draws=FLOOR_DRAWS)
    out["router_frozen/floor"] = floor["worst"]
    return out
