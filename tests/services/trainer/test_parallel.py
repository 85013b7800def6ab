"""Expert parallel and FSDP2 over 2 gloo processes give the 1-process loss and gradients, with and
without the overlapped (two pipelined halves) expert all-to-all."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from services.trainer.parallel import (
    ExpertParallelExperts,
    apply_block_options,
    finish_gradients,
    parallelize,
    route_halves,
    sync_delayed_amaxes,
    sync_router_loads,
)
from shared.config import ConfigError, load_config
from shared.kernels.dispatch import route_by_expert
from shared.model import MoETransformer
from shared.model.experts import RoutedExperts
from tests.services.trainer.distributed import spawn

STEPS = 3


def _cfg(ep_size: int, workers: int, *extra: str):
    return load_config(None, [
        "model.vocab_size=128", "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.n_kv_heads=1",
        "model.max_seq_len=32", "model.first_k_dense=0", "model.moe.n_routed_experts=4", "model.moe.top_k=2",
        "model.moe.expert_hidden=16", "model.moe.balance.bias_update_rate=0.01", "optim.name=adamw",
        f"train.workers={workers}", f"train.dp_size={workers}", f"train.ep_size={ep_size}", *extra,
    ])


def _batches():
    g = torch.Generator().manual_seed(123)
    return [torch.randint(0, 128, (4, 17), generator=g) for _ in range(STEPS)]


def _run(rank: int, world: int, ep_size: int, extra: tuple[str, ...] = ()) -> dict:
    cfg = _cfg(ep_size, world, *extra)
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    model = apply_block_options(model, cfg.train)
    model = parallelize(model, cfg.train, rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for tokens in _batches():
        rows = tokens.chunk(world)[rank]
        logits, aux = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), rows[:, 1:].reshape(-1)) + aux["aux_loss"]
        loss.backward()
        finish_gradients(model, cfg.train, world)
        sync_delayed_amaxes(model)
        grads.append(_full_grads(model))
        opt.step()
        opt.zero_grad()
        sync_router_loads(model)
        model.update_router_biases()
        if world > 1:
            dist.all_reduce(loss := loss.detach().clone())
            loss /= world
        losses.append(float(loss.detach()))
    amax = {}  # every rank's delayed-fp8 amax histories, stacked (ranks, history, role, groups)
    for n, b in sorted(model.named_buffers()):
        if n.endswith("amax_history"):
            ranks = [torch.empty_like(b) for _ in range(world)]
            dist.all_gather(ranks, b) if world > 1 else ranks[0].copy_(b)
            amax[n.replace("_checkpoint_wrapped_module.", "")] = torch.stack(ranks)
    return {"losses": losses, "grads": grads, "amax": amax}


def _full_grads(model) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if hasattr(g, "full_tensor"):
            g = g.full_tensor()
        elif dist.is_initialized() and name.endswith(("w1_EFD", "w2_EDF", "w3_EFD")) and dist.get_world_size() > 1 \
                and p.shape[0] != 4:  # EP shard: gather the experts of every rank
            parts = [torch.empty_like(g) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, g.contiguous())
            g = torch.cat(parts)
        out[name.replace("_checkpoint_wrapped_module.", "")] = g.detach().clone()
    return out


def _variants(rank: int, world: int, ep_size: int, variants: list[tuple[str, ...]]) -> list[dict]:
    return [_run(rank, world, ep_size, extra) for extra in variants]


def _spawn(ep_size: int, variants: list[tuple[str, ...]] | None = None) -> list[dict]:
    """Run every variant (extra config overrides) in one pair of spawned gloo processes."""
    return spawn(_variants, ep_size, variants or [()])


def _assert_same_run(got: dict, want: dict, what: str) -> None:
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=0, atol=1e-5,
                               msg=f"{what}: losses")
    for step, (g1, g2) in enumerate(zip(want["grads"], got["grads"], strict=True)):
        for name in g1:
            torch.testing.assert_close(g2[name], g1[name], rtol=1e-4, atol=1e-5, msg=f"{what}: step {step} {name}")


@pytest.mark.parametrize("ep_size", [2, 1], ids=["ep2-fsdp2", "fsdp2-only"])
def test_two_process_run_matches_one_process(ep_size):
    single = _run(0, 1, 1)
    (double,) = _spawn(ep_size)
    _assert_same_run(double, single, f"ep_size={ep_size}")


def test_overlapped_expert_all_to_all_matches_plain_ep_and_one_process():
    """train.ep_overlap pipelines two token halves (async all-to-all forward and backward, shared
    experts during the dispatch): the same losses and gradients as plain EP and as one process,
    also with activation checkpointing (the forward, collectives included, re-runs in backward);
    with a capacity, the same drops as plain EP."""
    overlap = ("train.ep_overlap=true",)
    cap = ("model.moe.capacity_factor=1.0",)
    plain, over, over_ckpt, plain_cap, over_cap = _spawn(2, [
        (), overlap, (*overlap, "train.activation_checkpointing=true"), cap, (*overlap, *cap),
    ])
    single = _run(0, 1, 1)
    _assert_same_run(over, single, "overlap vs 1 process")
    _assert_same_run(over, plain, "overlap vs plain EP")
    _assert_same_run(over_ckpt, plain, "overlap + activation checkpointing vs plain EP")
    _assert_same_run(over_cap, plain_cap, "overlap vs plain EP with capacity")


def test_ep_overlap_needs_expert_parallel():
    with pytest.raises(ConfigError, match="ep_overlap=true needs ep_size > 1"):
        _cfg(1, 2, "train.ep_overlap=true")
    with pytest.raises(ConfigError, match="ep_overlap"):
        _cfg(2, 2, "train.ep_overlap=sometimes")
    assert _cfg(2, 2, "train.ep_overlap=true").train.ep_overlap
    assert not _cfg(2, 2).train.ep_overlap


def test_delayed_fp8_experts_are_refused_under_expert_parallel():
    delayed = ("model.moe.precision.expert=fp8", "model.moe.precision.fp8_granularity=tensor",
               "model.moe.precision.fp8_scaling=delayed")
    with pytest.raises(ConfigError, match="fp8_scaling=delayed with train.ep_size > 1 is not supported"):
        _cfg(2, 2, *delayed)
    assert _cfg(1, 2, *delayed).train.ep_size == 1  # data parallel alone: amaxes are reduced
    assert _cfg(2, 2, *delayed[:2]).model.moe.precision.fp8_scaling == "current"


@pytest.mark.parametrize("capacity", [None, 3], ids=["dropless", "capacity"])
def test_halves_reproduce_the_full_routing(capacity):
    """Each half keeps, in expert order, exactly the full routing's assignments of its tokens."""
    idx_TK = torch.randint(0, 4, (11, 2), generator=torch.Generator().manual_seed(0))
    full, (first, second) = route_halves(idx_TK, 4, capacity, 5)
    assert torch.equal(full.order_A, route_by_expert(idx_TK, 4, capacity).order_A)
    assert torch.equal(first.counts_E + second.counts_E, full.counts_E)
    experts = idx_TK.reshape(-1)
    for half, offset in ((first, 0), (second, 10)):
        assert torch.equal(experts[half.order_A + offset], torch.sort(experts[half.order_A + offset], stable=True).values)
    kept = torch.cat([first.order_A, second.order_A + 10]).sort().values
    assert torch.equal(kept, full.order_A.sort().values)


@pytest.mark.parametrize(("T", "capacity"), [(9, None), (9, 2), (1, None), (0, None)])
def test_overlapped_layer_matches_plain_layer_in_one_process(tmp_path, T, capacity):
    """A 1-rank EP group: odd and empty halves, capacity drops, outputs and gradients to 1e-6."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        full = RoutedExperts(4, 8, 6, "loop")
        results = []
        for overlap in (False, True):
            layer = ExpertParallelExperts(full, dist.group.WORLD, 0, 1, overlap=overlap)
            g = torch.Generator().manual_seed(1)
            x = torch.randn(T, 8, generator=g, requires_grad=True)
            w = torch.rand(T, 2, generator=g, requires_grad=True)
            y, routing = layer(x, torch.randint(0, 4, (T, 2), generator=g), w, capacity)
            (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
            results.append([y.detach(), x.grad, w.grad, layer.w1_EFD.grad, layer.w2_EDF.grad, routing.dropped])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    finally:
        dist.destroy_process_group()


def test_delayed_fp8_amaxes_are_reduced_over_data_parallel_ranks():
    """With delayed fp8 scaling every rank must derive the same scales: its amax histories are
    max-reduced over the data-parallel ranks each step, so both ranks hold the same histories,
    and the first step's forward amaxes are those of one process on the whole batch (the max over
    the halves). Later steps are not compared with one process: each rank's gradients are `world`
    times larger (its loss is its own mean), and fp8 rounds them differently where the first
    step's scale of 1 puts them among the subnormals, so the runs drift apart by ~1%."""
    fp8 = ("model.moe.precision.expert=fp8", "model.moe.precision.dense=fp8", "model.moe.precision.fp8_granularity=tensor",
           "model.moe.precision.fp8_scaling=delayed", "model.moe.precision.amax_history_len=4")
    (double,) = _spawn(1, [fp8])
    single = _run(0, 1, 1, fp8)
    assert single["amax"] and set(double["amax"]) == set(single["amax"])
    for name, hist in single["amax"].items():  # (ranks, history, role x|w|grad, groups) after 3 steps
        got = double["amax"][name]
        assert torch.equal(got[0], got[1]), f"{name}: the ranks' histories differ"
        assert got[0, :3].gt(0).all(), f"{name}: a step left no amax"
        torch.testing.assert_close(got[0, 2, :2], hist[0, 2, :2], rtol=1e-5, atol=0,  # row 2: step 1
                                   msg=lambda m, n=name: f"{n}: x/w amaxes are not the max over both ranks: {m}")


def _clipped_run(rank: int, world: int, ep_size: int) -> dict:
    """Two steps of the real optimizer (Muon + AdamW) with a clip that binds, on the global norm."""
    from services.trainer.parallel import global_param_sum
    from shared.optim import build_optimizer

    cfg = _cfg(ep_size, world, "optim.name=muon_adamw", "optim.grad_clip=0.05", "optim.warmup_steps=0")
    torch.manual_seed(0)
    model = parallelize(MoETransformer(cfg.model), cfg.train, rank, world)
    opt = build_optimizer(model, cfg.optim, 10, param_sum=global_param_sum(model))
    norms = []
    for tokens in _batches()[:2]:
        rows = tokens.chunk(world)[rank]
        logits, aux = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), rows[:, 1:].reshape(-1)) + aux["aux_loss"]
        loss.backward()
        finish_gradients(model, cfg.train, world)
        stats = opt.step()
        opt.zero_grad()
        norms.append([stats["grad_norm"], *(v for k, v in sorted(stats.items()) if k.startswith(("grad_norm/", "update_rms/")))])
    params = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
        if world > 1 and ep_size > 1 and name.endswith(("w1_EFD", "w2_EDF", "w3_EFD")):
            parts = [torch.empty_like(t) for _ in range(world)]
            dist.all_gather(parts, t.contiguous())
            t = torch.cat(parts)
        params[name] = t.detach().clone()
    return {"norms": torch.tensor(norms, dtype=torch.float64), "params": params}


@pytest.mark.parametrize("ep_size", [2, 1], ids=["ep2-fsdp2", "fsdp2-only"])
def test_clipped_step_uses_one_global_norm_equal_to_one_process(ep_size):
    """Every shard counted once: the logged grad norm (and per-group norms and update RMS) of a
    2-process EP+FSDP run equal one process's, and after steps that clip, so do the parameters."""
    single = _clipped_run(0, 1, 1)
    double = spawn(_clipped_run, ep_size)
    assert single["norms"][0, 0] > 0.05 * 2  # the clip binds
    torch.testing.assert_close(double["norms"], single["norms"], rtol=1e-6, atol=1e-6)
    for name, want in single["params"].items():
        torch.testing.assert_close(double["params"][name], want, rtol=0, atol=1e-6, msg=name)
