"""Expert weights are quantised once per optimizer step, reused by every micro-batch's forward and
backward, and never used stale: any change to a parameter (an optimizer step, an in-place edit,
a rebinding of `.data`) changes the cache key."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.config.precision import PrecisionConfig
from shared.kernels.dispatch import expert_swiglu
from shared.model.transformer import MoETransformer
from shared.optim import build_optimizer
from shared.precision import native as native_mod
from shared.precision.experts import LowPrecisionGroupedMM
from shared.precision.ragged_fp8 import ragged_fp8_grouped_linear
from shared.precision.recipe import gemm_recipe
from shared.precision.weight_cache import WeightQuantCache, provenance

ROW = gemm_recipe(PrecisionConfig(expert="fp8", fp8_granularity="row"), "fp8")


def _experts(gen):
    e, d, f = 4, 32, 48
    return [torch.nn.Parameter(torch.randn(e, *shape, generator=gen) * 0.3) for shape in ((f, d), (f, d), (d, f))]


def _swiglu(cache, x, counts, w1, w3, w2):
    def gmm(a, w, c, _backend):
        return ragged_fp8_grouped_linear(a, w, c, ROW, cache, site=f"{w.shape[1]}x{w.shape[2]}")

    return expert_swiglu(x, w1, w3, w2, counts, gmm=gmm)


def test_k_micro_batches_quantise_each_weight_once_per_step_forward_and_backward():
    gen = torch.Generator().manual_seed(0)
    w1, w3, w2 = _experts(gen)
    opt = torch.optim.SGD([w1, w3, w2], lr=0.1)
    cache = WeightQuantCache()
    counts = torch.tensor([7, 0, 12, 5])
    for step in range(3):
        for _ in range(4):  # 4 micro-batches: each a forward and a backward through both grouped GEMMs
            x = torch.randn(24, 32, generator=gen).requires_grad_()  # as in a model: its Dgrad is needed
            _swiglu(cache, x, counts, w1, w3, w2).square().mean().backward()
        # two sites (the cat of gate/up, and down), two layouts each (forward along K, Dgrad along N)
        assert cache.quantisations == 4 * (step + 1), step
        opt.step()
        opt.zero_grad()


def test_a_changed_weight_is_never_served_from_the_cache():
    gen = torch.Generator().manual_seed(1)
    w1, w3, w2 = _experts(gen)
    cache = WeightQuantCache()
    counts = torch.tensor([7, 0, 12, 5])
    x = torch.randn(24, 32, generator=gen)
    _swiglu(cache, x, counts, w1, w3, w2)
    before = cache.quantisations
    with torch.no_grad():
        w2.mul_(-2.0)  # in place, no optimizer: the version counter moves
    got = _swiglu(cache, x, counts, w1, w3, w2)
    assert cache.quantisations == before + 2  # down's two layouts re-quantised; the gate/up cat's still cached
    assert torch.equal(got, _swiglu(WeightQuantCache(), x, counts, w1, w3, w2))
    w1.data = w1.data * 0.5  # a rebinding: new storage, same version
    got = _swiglu(cache, x, counts, w1, w3, w2)
    assert torch.equal(got, _swiglu(WeightQuantCache(), x, counts, w1, w3, w2))


def test_provenance_follows_cats_and_casts_down_to_parameters_and_refuses_the_rest():
    p, q = torch.nn.Parameter(torch.randn(2, 3, 4)), torch.nn.Parameter(torch.randn(2, 3, 4))
    key = provenance(torch.cat([p, q], dim=1))
    assert key == provenance(torch.cat([p, q], dim=1)) != provenance(torch.cat([p, q], dim=2))
    assert provenance(torch.cat([q, p], dim=1)) != key
    assert provenance(p.to(torch.bfloat16)) == provenance(p.to(torch.bfloat16)) != provenance(p)
    assert provenance(p * 2) is None  # not a parameter, a cast or a cat of them
    with torch.no_grad():
        assert provenance(torch.cat([p, q], dim=1)) is None  # no graph: quantised per call
    assert provenance(torch.randn(3)) is None


def test_tiny_model_on_the_ragged_path_quantises_its_expert_weights_once_per_optimizer_step(monkeypatch):
    # The native backend refuses CPU tensors; here the seam is let through to its CPU reference kernel.
    monkeypatch.setattr(native_mod, "_check_cuda", lambda x, w: None)
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.moe.precision.expert=fp8",
                                            "model.moe.precision.fp8_granularity=row", "model.moe.expert_hidden=32",
                                            "model.moe.precision.backend=emulate", "optim.log_stats=false"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    gmms = [m for m in model.modules() if isinstance(m, LowPrecisionGroupedMM)]
    assert gmms
    for g in gmms:
        g.native = g.require_native = True
    opt = build_optimizer(model, cfg.optim, 10)
    tokens = torch.randint(0, 256, (3, 2, 17), generator=torch.Generator().manual_seed(0))
    for step in range(2):
        for micro in range(3):
            logits, aux = model(tokens[micro, :, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[micro, :, 1:].reshape(-1))
            (loss + aux["aux_loss"]).backward()
        assert all(g.weight_cache.quantisations == 4 * (step + 1) for g in gmms), [g.weight_cache.quantisations for g in gmms]
        opt.step()
        opt.zero_grad()
    assert all(g.weight_cache.resident_bytes() > 0 for g in gmms)


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_cached_and_uncached_steps_train_identically(micro_batches):
    gen = torch.Generator().manual_seed(2)
    weights = _experts(gen)
    twins = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    opts = [torch.optim.SGD(ws, lr=0.5) for ws in (weights, twins)]
    cache = WeightQuantCache()
    counts = torch.tensor([9, 3, 0, 12])
    for _ in range(3):
        xs = [torch.randn(24, 32, generator=gen) for _ in range(micro_batches)]
        for x in xs:
            _swiglu(cache, x, counts, *weights).square().mean().backward()
            _swiglu(WeightQuantCache(), x, counts, *twins).square().mean().backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
    for a, b in zip(weights, twins, strict=True):
        assert torch.equal(a, b)
