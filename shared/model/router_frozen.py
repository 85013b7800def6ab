"""The frozen router: how a trained model, no longer updating its bias, balances unseen tokens; and
the post-hoc bias that balances it.

Why: the training step's MaxVio is measured while the bias moves after every micro-batch, a
feedback loop that keeps each step's summed loads near balance whatever the router does. A
deployed model has no feedback, so what counts is MaxVio of the frozen model over many unseen
tokens (MaxVio_global, Wang et al. 2024, arXiv:2408.15664), read beside its floor on the same
tokens (`router_floor`): a router balanced in expectation reads the floor, not zero.

`record_routing` runs the model once over a set of sequences and keeps every MoE layer's scores;
`frozen_stats` reads from them the MaxVio with the eval-time bias, the floor, the MaxVio without
any bias and the bias sensitivity (how much one expert's load moves when its bias moves by 0.01).
The no-bias and sensitivity figures are counterfactuals of one layer at a time: the layers before
it route as the model does.

`calibrate_biases` re-solves each layer's eval-time bias on the frozen model, in layer order (a
layer's input depends on the routing of the layers before it, so each is solved after the ones
below are fixed). Only the eval-time buffer (`expert_bias_avg_E`) changes: parameters, the
training bias and anything an optimizer holds are left as they are. Loads are combined through an
injected `reduce` (a sum over data-parallel ranks in the trainer), so N processes solve the bias
one process would; this module imports nothing distributed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from shared.model.router_floor import block_bootstrap_floor, document_blocks
from shared.model.stats import max_violation

SENSITIVITY_STEP = 0.01  # bias change whose effect on an expert's load is reported


@dataclass
class Sequences:
    """Sequences in stream order: inputs and targets (N, T) and each sequence's source."""

    inputs_NT: Tensor
    targets_NT: Tensor
    sources_N: tuple[str, ...]

    def __len__(self) -> int:
        return self.inputs_NT.shape[0]

    def slice(self, start: int, stop: int) -> Sequences:
        return Sequences(self.inputs_NT[start:stop], self.targets_NT[start:stop], self.sources_N[start:stop])


@dataclass
class RoutingRecord:
    """Every MoE layer's router scores (fp32, tokens in stream order) and each token's document."""

    scores: dict[int, Tensor]  # layer index → scores_TE
    block_T: Tensor
    block_sources: list[str]
    lm_loss: float  # mean next-token loss over the sequences, with the routing recorded


def moe_routers(model: nn.Module) -> dict[int, nn.Module]:
    """{block index: router} of every MoE layer, in layer order."""
    return {i: block.ffn.router for i, block in enumerate(model.layers) if getattr(block, "is_moe", False)}


@torch.no_grad()
def record_routing(model: nn.Module, seqs: Sequences, eos_id: int, chunk: int = 64,
                   layers: Sequence[int] | None = None) -> RoutingRecord:
    """Run `model` in eval mode over `seqs` (in chunks of `chunk` sequences) and keep the scores of
    every MoE layer (or of `layers`), on the CPU; the model's train/eval mode is restored afterwards."""
    routers = moe_routers(model)
    wanted = list(routers) if layers is None else list(layers)
    seen: dict[int, list[Tensor]] = {i: [] for i in wanted}
    hooks = [routers[i].register_forward_hook(lambda m, a, out, i=i: seen[i].append(out.scores_TE.detach().float().cpu()))
             for i in wanted]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum, tokens = 0.0, 0
    try:
        for start in range(0, len(seqs), chunk):
            part = seqs.slice(start, start + chunk)
            _, aux = model(part.inputs_NT.to(device), part.targets_NT.to(device))
            loss_sum += float(aux["lm_loss"]) * part.targets_NT.numel()
            tokens += part.targets_NT.numel()
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    block_NT, block_sources = document_blocks(seqs.inputs_NT, seqs.sources_N, eos_id)
    return RoutingRecord({i: torch.cat(s) for i, s in seen.items()}, block_NT.reshape(-1), block_sources,
                         loss_sum / max(tokens, 1))


def _eval_bias(router: nn.Module) -> Tensor:
    """The bias the router selects with in eval mode."""
    was = router.training
    router.eval()
    bias = router.selection_bias().detach().cpu()
    router.train(was)
    return bias


def _loads(router: nn.Module, scores_TE: Tensor, bias_E: Tensor) -> Tensor:
    idx_TK = router.select(scores_TE, bias_E)
    return torch.bincount(idx_TK.reshape(-1), minlength=scores_TE.shape[1]).double()


def _block_loads(router: nn.Module, scores_TE: Tensor, bias_E: Tensor, block_T: Tensor, n_blocks: int) -> Tensor:
    idx_TK = router.select(scores_TE, bias_E)
    flat = block_T[:, None].expand_as(idx_TK) * scores_TE.shape[1] + idx_TK
    return torch.bincount(flat.reshape(-1), minlength=n_blocks * scores_TE.shape[1]).view(n_blocks, -1).double()


def bias_sensitivity(router: nn.Module, scores_TE: Tensor, bias_E: Tensor, step: float = SENSITIVITY_STEP) -> float:
    """Mean over experts of the relative change of an expert's load when its bias alone rises by `step`."""
    base = _loads(router, scores_TE, bias_E)
    changes = []
    for e in range(scores_TE.shape[1]):
        moved = bias_E.clone()
        moved[e] += step
        changes.append(float((_loads(router, scores_TE, moved)[e] - base[e]) / base[e].clamp_min(1)))
    return sum(changes) / len(changes)


def source_mix(record: RoutingRecord) -> dict[str, float]:
    """Each source's share of the recorded tokens."""
    tokens_B = torch.bincount(record.block_T, minlength=len(record.block_sources)).double()
    out: dict[str, float] = {}
    for b, source in enumerate(record.block_sources):
        out[source] = out.get(source, 0.0) + float(tokens_B[b])
    total = sum(out.values())
    return {s: n / total for s, n in out.items()}


def maxvio_at_mix(loads_BE: Tensor, block_sources: Sequence[str], mix: dict[str, float]) -> float:
    """MaxVio of the loads these documents would sum to if their sources made up the tokens in the
    shares `mix` gives: each source's routing shares (its loads over its own assignments) weighted
    by its share, over the sources present in both (their shares renormalised)."""
    by_source: dict[str, Tensor] = {}
    for b, source in enumerate(block_sources):
        by_source[source] = by_source.get(source, 0) + loads_BE[b]
    common = [s for s in by_source if mix.get(s, 0) > 0 and float(by_source[s].sum()) > 0]
    if not common:
        raise ValueError(f"no source of the measured tokens ({sorted(by_source)}) is in the mix ({sorted(mix)})")
    weight = sum(mix[s] for s in common)
    load_E = sum(mix[s] / weight * by_source[s] / by_source[s].sum() for s in common)
    return float(max_violation(load_E))


def frozen_stats(model: nn.Module, record: RoutingRecord, draws: int = 400, seed: int = 0,
                 reference_mix: dict[str, float] | None = None) -> dict:
    """The frozen router's figures on the recorded tokens (layer keys are `layer<i>`):

    `maxvio_worst` and `maxvio` (per layer) with the eval-time bias; `floor_worst` and `floor`, the
    block-bootstrap floor of the same figures on the same tokens; `ratio_to_floor` (worst / its
    floor); `maxvio_no_bias` (selection by the scores alone); `bias_sensitivity` (relative load
    change per +0.01 of an expert's bias, mean over experts); `tokens`, `documents`, `lm_loss`;
    `source_mix` (each source's share of the tokens).

    With `reference_mix` (another stream's `source_mix`), also `maxvio_at_reference_mix` (per layer)
    and its worst: the same documents' routing with their sources reweighted to that mix. A stream
    that reads far above its floor but near it at the reference mix is unbalanced by what it is
    made of, not by how each source routes; `reference_mix_missing` names its sources the
    reference lacks (left out of that figure)."""
    routers = moe_routers(model)
    n_blocks = len(record.block_sources)
    maxvio, no_bias, sensitivity, block_loads, at_mix = {}, {}, {}, [], {}
    for i, scores_TE in record.scores.items():
        router, bias_E = routers[i], _eval_bias(routers[i])
        loads_BE = _block_loads(router, scores_TE, bias_E, record.block_T, n_blocks)
        block_loads.append(loads_BE)
        maxvio[f"layer{i}"] = float(max_violation(loads_BE.sum(0)))
        if reference_mix is not None:
            at_mix[f"layer{i}"] = maxvio_at_mix(loads_BE, record.block_sources, reference_mix)
        no_bias[f"layer{i}"] = float(max_violation(_loads(router, scores_TE, torch.zeros_like(bias_E))))
        sensitivity[f"layer{i}"] = bias_sensitivity(router, scores_TE, bias_E)
    source_ids = {s: k for k, s in enumerate(dict.fromkeys(record.block_sources))}
    floor = block_bootstrap_floor(torch.stack(block_loads), [source_ids[s] for s in record.block_sources],
                                  draws=draws, seed=seed)
    worst = max(maxvio.values())
    mix_figures = {} if reference_mix is None else {
        "maxvio_at_reference_mix": at_mix, "maxvio_at_reference_mix_worst": max(at_mix.values()),
        "reference_mix_missing": sorted(set(record.block_sources) - {s for s, w in reference_mix.items() if w > 0})}
    return {"tokens": int(record.block_T.numel()), "documents": n_blocks, "lm_loss": record.lm_loss,
            "maxvio_worst": worst, "floor_worst": floor["worst"], "ratio_to_floor": worst / max(floor["worst"], 1e-12),
            "maxvio": maxvio, "floor": dict(zip(maxvio, floor["per_layer"], strict=True)),
            "maxvio_no_bias": no_bias, "maxvio_no_bias_worst": max(no_bias.values()), "bias_sensitivity": sensitivity,
            "source_mix": source_mix(record), **mix_figures}


Reduce = Callable[[Tensor], Tensor]


def solve_bias(router: nn.Module, scores_TE: Tensor, start_E: Tensor, reduce: Reduce | None = None,
               iters: int = 400, rate: tuple[float, float] = (0.03, 3e-4)) -> tuple[Tensor, float]:
    """The bias that minimises MaxVio of the (reduced) loads of `scores_TE`, and that MaxVio.

    Error-rule steps b_i += γ·(mean − load_i)/mean, γ falling geometrically from rate[0] to rate[1]
    (a 0.01 bias move shifts an expert's load by ~20% on a trained tiny router, so γ much above 0.05
    overshoots), keeping the best bias seen; the mean of the bias is kept (top-k ignores a common
    shift). Deterministic given the reduced loads, so every rank ends with the same bias."""
    reduce = reduce or (lambda t: t)
    bias = start_E.detach().double().clone()
    centre = bias.mean()
    best_bias, best = bias.clone(), float("inf")
    decay = (rate[1] / rate[0]) ** (1.0 / max(iters - 1, 1))
    for it in range(iters):
        load_E = reduce(_loads(router, scores_TE, bias.float()))
        vio = float(max_violation(load_E))
        if vio < best:
            best, best_bias = vio, bias.clone()
        mean = load_E.mean().clamp_min(1e-20)
        bias += rate[0] * decay**it * (mean - load_E) / mean
        bias += centre - bias.mean()
    return best_bias.float(), best


@torch.no_grad()
def calibrate_biases(model: nn.Module, seqs: Sequences, eos_id: int, reduce: Reduce | None = None,
                     chunk: int = 64, iters: int = 400) -> dict[str, dict[str, float]]:
    """Re-solve every MoE layer's eval-time bias on `seqs`, layer by layer in order; returns per layer
    the calibration tokens' MaxVio before and after and the largest bias change.

    Requires the routers to select with the eval-time buffer in eval mode (`eval_bias: average`):
    with `live` the calibrated bias would never be used."""
    routers = moe_routers(model)
    for i, router in routers.items():
        if router.cfg.balance.eval_bias != "average":
            raise ValueError(f"layer {i}: model.moe.balance.eval_bias is {router.cfg.balance.eval_bias!r}; calibration "
                             "writes the eval-time bias, which only eval_bias=average routes with")
    reduce = reduce or (lambda t: t)
    out = {}
    for i, router in routers.items():
        scores_TE = record_routing(model, seqs, eos_id, chunk, layers=[i]).scores[i]
        start = router.expert_bias_avg_E.detach().cpu().clone()
        before = float(max_violation(reduce(_loads(router, scores_TE, start))))
        bias, after = solve_bias(router, scores_TE, start, reduce, iters)
        router.expert_bias_avg_E.copy_(bias)
        out[f"layer{i}"] = {"maxvio_before": before, "maxvio_after": after,
                            "bias_change_max": float((bias - start).abs().max())}
    return out
