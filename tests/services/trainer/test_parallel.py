"""Expert parallel and FSDP2 over 2 gloo processes give the 1-process loss and gradients."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from services.trainer.parallel import finish_gradients, parallelize, sync_router_loads
from shared.config import load_config
from shared.model import MoETransformer

STEPS = 3


def _cfg(ep_size: int, workers: int):
    return load_config(None, [
        "model.vocab_size=128", "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.n_kv_heads=1",
        "model.max_seq_len=32", "model.first_k_dense=0", "model.moe.n_routed_experts=4", "model.moe.top_k=2",
        "model.moe.expert_hidden=16", "model.moe.balance.bias_update_rate=0.01", "optim.name=adamw",
        f"train.workers={workers}", f"train.dp_size={workers}", f"train.ep_size={ep_size}",
    ])


def _batches():
    g = torch.Generator().manual_seed(123)
    return [torch.randint(0, 128, (4, 17), generator=g) for _ in range(STEPS)]


def _run(rank: int, world: int, ep_size: int) -> dict:
    cfg = _cfg(ep_size, world)
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    model = parallelize(model, cfg.train, rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for tokens in _batches():
        rows = tokens.chunk(world)[rank]
        logits, aux = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), rows[:, 1:].reshape(-1)) + aux["aux_loss"]
        loss.backward()
        finish_gradients(model, cfg.train, world)
        grads.append(_full_grads(model))
        opt.step()
        opt.zero_grad()
        sync_router_loads(model)
        model.update_router_biases()
        if world > 1:
            dist.all_reduce(loss := loss.detach().clone())
            loss /= world
        losses.append(float(loss))
    return {"losses": losses, "grads": grads}


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
        out[name] = g.detach().clone()
    return out


def _worker(rank, world, port, ep_size, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = _run(rank, world, ep_size)
        if rank == 0:  # numpy travels by value (tensors would need the sender alive)
            result["grads"] = [{k: v.numpy() for k, v in g.items()} for g in result["grads"]]
            queue.put(result)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(ep_size: int) -> dict:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, ep_size, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=300)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    result["grads"] = [{k: torch.from_numpy(v) for k, v in g.items()} for g in result["grads"]]
    return result


@pytest.mark.parametrize("ep_size", [2, 1], ids=["ep2-fsdp2", "fsdp2-only"])
def test_two_process_run_matches_one_process(ep_size):
    single = _run(0, 1, 1)
    double = _spawn(ep_size)
    torch.testing.assert_close(torch.tensor(double["losses"]), torch.tensor(single["losses"]), rtol=0, atol=1e-5)
    for step, (g1, g2) in enumerate(zip(single["grads"], double["grads"], strict=True)):
        for name in g1:
            torch.testing.assert_close(g2[name], g1[name], rtol=1e-4, atol=1e-5, msg=f"step {step} {name}")
