"""Checkpoints round-trip exactly, keep the newest N, and survive a kill -9 during a save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import torch

from services.trainer.checkpoint import CheckpointManager


def _model_and_opt(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.register_buffer("router_bias", torch.zeros(4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def _step(model, opt):
    loss = model(torch.randn(5, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_roundtrip_restores_weights_optimizer_buffers_and_rng(tmp_path):
    model, opt = _model_and_opt()
    for _ in range(3):
        _step(model, opt)
    model.router_bias += 0.5
    mgr = CheckpointManager(tmp_path, keep_last=2)
    mgr.save(3, model, opt, {"data": {"position": 42}})
    expected_next = torch.randn(3)

    fresh, fresh_opt = _model_and_opt(seed=1)
    meta = mgr.load(mgr.latest(), fresh, fresh_opt)
    assert meta == {"step": 3, "data": {"position": 42}, "load_gaps": []}
    assert torch.equal(torch.randn(3), expected_next)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    saved, loaded = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for key in saved:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(torch.as_tensor(saved[key][name]), torch.as_tensor(loaded[key][name]))


def test_a_checkpoint_from_before_the_router_bias_average_resumes_with_the_average_set_to_the_bias(tmp_path, caplog):
    from shared.config.model import MoEConfig
    from shared.model.moe import MoELayer

    def layer_and_opt():
        torch.manual_seed(0)
        layer = MoELayer(16, MoEConfig(n_routed_experts=4, n_shared_experts=0, expert_hidden=8, top_k=1, bungee=False))
        return layer, torch.optim.AdamW(layer.parameters(), lr=1e-2)

    old, old_opt = layer_and_opt()
    old.router.expert_bias_E.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    old.router._non_persistent_buffers_set.add("expert_bias_avg_E")  # saved as the code before the average saved
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, old, old_opt, {})

    layer, opt = layer_and_opt()
    with caplog.at_level("WARNING", logger="services.trainer.checkpoint"):
        meta = mgr.load(mgr.latest(), layer, opt)
    assert torch.equal(layer.router.expert_bias_E, torch.tensor([0.1, -0.2, 0.3, 0.0]))
    assert torch.equal(layer.router.expert_bias_avg_E, layer.router.expert_bias_E)
    assert len(meta["load_gaps"]) == 1 and "1 router bias average(s)" in meta["load_gaps"][0]
    ours = [r.getMessage() for r in caplog.records if r.name == "services.trainer.checkpoint"]
    assert ours == [f"checkpoint {mgr.latest()}: {meta['load_gaps'][0]}"]


def test_a_checkpoint_without_this_ranks_rng_file_loads_and_says_so(tmp_path, caplog):
    model, opt = _model_and_opt()
    mgr = CheckpointManager(tmp_path)
    path = mgr.save(1, model, opt, {"step": 1})
    (path / "rank0.pt").unlink()
    fresh, fresh_opt = _model_and_opt(seed=1)
    with caplog.at_level("WARNING", logger="services.trainer.checkpoint"):
        meta = mgr.load(path, fresh, fresh_opt)
    assert meta["step"] == 1 and len(meta["load_gaps"]) == 1 and "no RNG state rank0.pt" in meta["load_gaps"][0]
    assert any("no RNG state rank0.pt" in r.getMessage() for r in caplog.records if r.name == "services.trainer.checkpoint")


def test_keeps_only_the_newest_checkpoints(tmp_path):
    model, opt = _model_and_opt()
    mgr = CheckpointManager(tmp_path, keep_last=2)
    for step in (10, 20, 30):
        mgr.save(step, model, opt, {})
    assert [p.name for p in mgr.list()] == ["step_00000020", "step_00000030"]


def test_kill_during_save_leaves_previous_checkpoint_loadable(tmp_path):
    script = textwrap.dedent(f"""
        import time, torch
        import torch.distributed.checkpoint as dcp
        from services.trainer.checkpoint import CheckpointManager
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mgr = CheckpointManager({str(tmp_path)!r})
        mgr.save(1, model, opt, {{"ok": True}})
        real_save = dcp.save
        def slow_save(*a, **k):
            real_save(*a, **k)
            print("saving", flush=True)
            time.sleep(60)
        dcp.save = slow_save
        import services.trainer.checkpoint as ck
        ck.dcp.save = slow_save
        mgr.save(2, model, opt, {{"ok": True}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.stdout.readline().strip() == "saving"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.1)
    mgr = CheckpointManager(tmp_path)
    assert (tmp_path / "step_00000002.tmp").exists()
    assert mgr.latest().name == "step_00000001"
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert mgr.load(mgr.latest(), model, opt)["ok"] is True
