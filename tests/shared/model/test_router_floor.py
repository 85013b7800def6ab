"""The block-bootstrap floor against synthetic loads whose floor is known by simulation."""

from __future__ import annotations

import pytest
import torch

from shared.model.router_floor import block_bootstrap_floor, document_blocks
from shared.model.stats import max_violation

E = 8


def _documents(gen: torch.Generator, per_source: list[int], lengths: tuple[int, int], concentration: float,
               source_means: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """Loads (1, docs, E) of documents whose assignments follow a per-document preference drawn around
    their source's mean (Dirichlet), and each document's source; 2 assignments per token."""
    strata = torch.repeat_interleave(torch.arange(len(per_source)), torch.tensor(per_source))
    n_B = torch.randint(lengths[0], lengths[1] + 1, (len(strata),), generator=gen) * 2
    pref_BE = torch.distributions.Dirichlet(concentration * source_means[strata]).sample()
    loads_BE = torch.zeros(len(strata), E, dtype=torch.float64)
    left_B, rest_B = n_B.double(), torch.ones(len(strata), dtype=torch.float64)
    for e in range(E):  # a multinomial draw per document as a chain of binomials
        p_B = (pref_BE[:, e].double() / rest_B.clamp_min(1e-12)).clamp(0, 1)
        loads_BE[:, e] = torch.binomial(left_B, p_B, generator=gen) if e < E - 1 else left_B
        left_B, rest_B = left_B - loads_BE[:, e], rest_B - pref_BE[:, e].double()
    return loads_BE[None], strata.tolist()



def _true_floor(per_source, lengths, concentration, source_means, fresh: int) -> float:
    """MaxVio of a router balanced in expectation, over fresh samples of the same process: each
    document's deviation from its source's mean, added to the uniform expectation."""
    gen = torch.Generator().manual_seed(99)
    torch.manual_seed(99)
    out = []
    for _ in range(fresh):
        loads, strata = _documents(gen, per_source, lengths, concentration, source_means)
        n_B = loads[0].sum(-1)
        mean_BE = source_means[torch.tensor(strata)].double()
        balanced = (n_B[:, None] / E + loads[0] - n_B[:, None] * mean_BE).sum(0)
        out.append(float(max_violation(balanced)))
    return sum(out) / len(out)


@pytest.mark.parametrize("concentration", [3.0, 30.0], ids=["clumpy-documents", "mild-documents"])
def test_bootstrap_floor_matches_the_simulated_floor_of_correlated_documents(concentration):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    # three sources with different (unbalanced) mean routing: the floor must not depend on that
    source_means = torch.distributions.Dirichlet(torch.full((E,), 5.0)).sample((3,))
    per_source, lengths = [150, 90, 60], (100, 600)
    loads, strata = _documents(gen, per_source, lengths, concentration, source_means)
    got = block_bootstrap_floor(loads, strata, draws=1000)
    want = _true_floor(per_source, lengths, concentration, source_means, fresh=150)
    assert got["per_layer"][0] == pytest.approx(want, rel=0.2)
    assert got["worst"] == pytest.approx(got["per_layer"][0])
    # documents that route alike lift the floor far above independent tokens'
    assert want > 0.03


def test_independent_tokens_give_the_multinomial_floor():
    """One token per block: the floor is that of independent tokens, well below correlated documents'."""
    gen = torch.Generator().manual_seed(1)
    idx = torch.multinomial(torch.full((E,), 1 / E), 4000, replacement=True, generator=gen)
    loads = torch.nn.functional.one_hot(idx, E)[None].double()
    got = block_bootstrap_floor(loads, [0] * 4000, draws=300)["per_layer"][0]
    sims = [float(max_violation(torch.bincount(torch.multinomial(torch.full((E,), 1 / E), 4000, replacement=True,
                                                                 generator=gen), minlength=E))) for _ in range(400)]
    assert got == pytest.approx(sum(sims) / len(sims), rel=0.15)


def test_a_router_unbalanced_in_expectation_gets_the_same_floor():
    gen = torch.Generator().manual_seed(2)
    torch.manual_seed(2)
    uniform = torch.full((1, E), 1 / E)
    loads, strata = _documents(gen, [200], (50, 300), 5.0, uniform)
    skewed = loads.clone()
    skewed[0, :, 0] += loads[0].sum(-1) * 0.5  # expert 0 takes half as much again of every document's share
    a, b = block_bootstrap_floor(loads, strata, seed=3), block_bootstrap_floor(skewed, strata, seed=3)
    assert float(max_violation(skewed[0].sum(0))) > 3 * a["per_layer"][0]
    assert b["per_layer"][0] == pytest.approx(a["per_layer"][0], rel=0.35)


def test_worst_layer_floor_is_the_mean_of_each_draws_maximum():
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    uniform = torch.full((1, E), 1 / E)
    l0, strata = _documents(gen, [120], (50, 200), 5.0, uniform)
    l1, _ = _documents(gen, [120], (50, 200), 5.0, uniform)
    l1 = l1 / l1[0].sum(-1, keepdim=True) * l0[0].sum(-1, keepdim=True)  # same assignments per document
    got = block_bootstrap_floor(torch.cat([l0, l1]), strata)
    assert got["worst"] > max(got["per_layer"])


def test_documents_continue_across_a_sources_consecutive_sequences():
    eos = 0
    inputs = torch.tensor([[5, 6, 0, 7], [9, 9, 9, 9], [8, 0, 3, 3], [4, 4, 0, 2]])
    blocks, sources = document_blocks(inputs, ["a", "b", "a", "b"], eos)
    # source a's stream: 5 6 0 | 7 8 0 | 3 3 ; source b's: 9 9 9 9 4 4 0 | 2
    assert blocks.tolist() == [[0, 0, 0, 1], [3, 3, 3, 3], [1, 1, 2, 2], [3, 3, 3, 4]]
    assert sources == ["a", "a", "a", "b", "b"]


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="layers, blocks, experts"):
        block_bootstrap_floor(torch.zeros(3, E), [0, 0, 0])
    with pytest.raises(ValueError, match="one source per block"):
        block_bootstrap_floor(torch.ones(1, 3, E), [0, 0])
