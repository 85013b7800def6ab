"""AdamW's fused kernel: chosen by `optim.adamw_impl`, the same training to float rounding as foreach,
and checkpoints that move between the two."""

from __future__ import annotations

import pytest
import torch

from shared.config import load_config
from shared.model import MoETransformer
from shared.optim import build_optimizer
from shared.optim.optimizer import adamw_fused


def _train(impl: str, steps: int = 4, state: dict | None = None, start: int = 0):
    cfg = load_config("configs/tiny.yaml", [f"optim.adamw_impl={impl}", "optim.lr=0.01", "optim.name=adamw",
                                            "model.n_layers=2", "model.vocab_size=256"])
    torch.manual_seed(0)
    model = MoETransformer(cfg.model)
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    losses = []
    for step in range(start, start + steps):
        tokens = torch.randint(0, cfg.model.vocab_size, (2, 17), generator=torch.Generator().manual_seed(step))
        _, aux = model(tokens[:, :-1], tokens[:, 1:])
        (aux["lm_loss"] + aux["aux_loss"]).backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(aux["lm_loss"].detach()))
    return model, opt, losses


def test_impl_choice_reaches_torch_adamw():
    for impl, fused in (("fused", True), ("foreach", False), ("auto", True)):  # auto: plain CPU tensors fuse
        _, opt, _ = _train(impl, steps=0)
        defaults = opt.optimizers["adamw"].defaults
        assert bool(defaults["fused"]) is fused and bool(defaults["foreach"]) is not fused


def test_fused_and_foreach_train_the_same_to_float_rounding():
    m_fused, _, l_fused = _train("fused")
    m_foreach, _, l_foreach = _train("foreach")
    assert l_fused[0] == l_foreach[0]  # nothing stepped yet
    torch.testing.assert_close(torch.tensor(l_fused), torch.tensor(l_foreach), rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(m_fused.state_dict().items(), m_foreach.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


def test_a_foreach_checkpoint_resumes_under_fused():
    model, opt, _ = _train("foreach", steps=2)
    state = {"model": model.state_dict(), "opt": opt.state_dict()}
    _, _, resumed = _train("fused", steps=2, state=state, start=2)
    _, _, straight = _train("foreach", steps=4)
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(straight[2:]), rtol=1e-5, atol=1e-5)


def test_auto_keeps_foreach_for_sharded_cpu_parameters_and_rejects_unknown(tmp_path):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    plain = torch.zeros(4)
    assert adamw_fused("auto", [plain]) and not adamw_fused("foreach", [plain]) and adamw_fused("fused", [plain])
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        shard = distribute_tensor(plain, init_device_mesh("cpu", (1,)), [Shard(0)])
        assert not adamw_fused("auto", [plain, shard])
    finally:
        dist.destroy_process_group()
    with pytest.raises(ValueError, match="unknown AdamW implementation"):
        adamw_fused("adam8bit", [plain])
