"""The floor of a frozen router's MaxVio: what a router balanced in expectation reads on the same tokens.

Why not uniform routing of independent tokens: tokens of one document route alike, documents span
sequences, and a source's documents share a topic, so loads summed over N real tokens fluctuate far
more than N independent draws would (0.015 for 131k independent tokens, 8 experts, top-2; several
times that on real mixtures). A MaxVio is only "bad" by how far it sits above what perfect
balance *in expectation* would show on the same tokens.

The estimate is a stratified block bootstrap (Künsch 1989; blocks = documents, strata = sources):
every block's load vector is taken relative to what its own source routes on average
(d_b = L_b − n_b·p_s, n_b its assignments, p_s its source's routing shares), the blocks of each
source are resampled with replacement, as many as the source has, and each draw's total is the
balanced expectation of its assignments plus the resampled deviations. The mean MaxVio over the
draws is the floor. A router that is unbalanced in expectation gets the same floor as a balanced
one: the floor measures the data's fluctuation, never the router's bias.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _maxvio_rows(load_NE: Tensor) -> Tensor:
    mean_N = load_NE.mean(-1)
    return (load_NE.max(-1).values - mean_N) / mean_N.clamp_min(1e-20)


def block_bootstrap_floor(loads_LBE: Tensor, strata_B: Sequence[int] | Tensor, draws: int = 400,
                          seed: int = 0) -> dict[str, float | list[float]]:
    """Floor of MaxVio for loads summed over blocks: `loads_LBE[l, b, e]` is the number of
    assignments of block b (a document) to expert e in layer l, `strata_B[b]` the block's source.

    Returns `per_layer` (the floor of each layer's MaxVio) and `worst` (the floor of the worst
    layer's MaxVio: each draw resamples the same documents in every layer and takes the maximum,
    as the measured worst layer does). Raises on a source with no assignments."""
    if loads_LBE.dim() != 3 or loads_LBE.shape[1] == 0:
        raise ValueError(f"loads must be (layers, blocks, experts) with at least one block, got {tuple(loads_LBE.shape)}")
    loads = loads_LBE.double()
    strata = torch.as_tensor(strata_B, dtype=torch.long)
    if strata.shape != (loads.shape[1],):
        raise ValueError(f"strata must give one source per block ({loads.shape[1]}), got {tuple(strata.shape)}")
    L, _, E = loads.shape
    n_B = loads[0].sum(-1)  # assignments per block (the same in every layer: tokens × top_k)
    dev_LBE = torch.empty_like(loads)
    for s in strata.unique():
        members = strata == s
        total_LE = loads[:, members].sum(1)
        share_LE = total_LE / total_LE.sum(-1, keepdim=True).clamp_min(1e-20)
        if float(total_LE.sum()) == 0:
            raise ValueError(f"source {int(s)} has blocks but no routed assignment")
        dev_LBE[:, members] = loads[:, members] - n_B[members, None] * share_LE[:, None, :]
    gen = torch.Generator().manual_seed(seed)
    picks = []
    for s in strata.unique():
        members = (strata == s).nonzero().squeeze(1)
        picks.append(members[torch.randint(len(members), (draws, len(members)), generator=gen)])
    pick_DN = torch.cat(picks, dim=1)  # draws × blocks, each source keeping its block count
    n_D = n_B[pick_DN].sum(-1)
    per_layer_DL = torch.stack([_maxvio_rows(n_D[:, None] / E + dev_LBE[layer][pick_DN].sum(1)) for layer in range(L)], 1)
    return {"per_layer": per_layer_DL.mean(0).tolist(), "worst": float(per_layer_DL.max(1).values.mean())}


def document_blocks(inputs_NT: Tensor, sources_N: Sequence[str], eos_id: int) -> tuple[Tensor, list[str]]:
    """Block (document) number of every token of sequences taken in stream order, and each block's source.

    Consecutive sequences of one source are consecutive windows of its packed token stream
    (shared.data.mixture), so a document that a sequence cuts continues in that source's next
    sequence: tokens are numbered per source along its own stream, a new document after every
    separator. Returns `block_NT` (global block ids) and `block_sources` (the source of each id)."""
    inputs_NT = inputs_NT.cpu()
    N, T = inputs_NT.shape
    if len(sources_N) != N:
        raise ValueError(f"{len(sources_N)} sources for {N} sequences")
    block_NT = torch.empty(N, T, dtype=torch.long)
    next_id, block_sources = 0, []
    for source in dict.fromkeys(sources_N):
        rows = [i for i, s in enumerate(sources_N) if s == source]
        stream = inputs_NT[rows].reshape(-1)
        after_sep = torch.zeros_like(stream, dtype=torch.long)
        after_sep[1:] = (stream[:-1] == eos_id).long().cumsum(0)
        block_NT[rows] = (after_sep + next_id).view(len(rows), T)
        n_docs = int(after_sep[-1]) + 1
        block_sources += [source] * n_docs
        next_id += n_docs
    return block_NT, block_sources
