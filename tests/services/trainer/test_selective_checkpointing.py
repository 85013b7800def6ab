"""Selective activation checkpointing: the same loss and gradients as none and full checkpointing,
and it keeps the GEMM outputs a full checkpoint recomputes."""

from __future__ import annotations

import pytest
import torch

from services.trainer.parallel import apply_block_options
from shared.config import load_config
from shared.model import MoETransformer


def _grads(policy: str | None):
    extra = [] if policy is None else ["train.activation_checkpointing=true",
                                       f"train.activation_checkpointing_policy={policy}"]
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *extra])
    torch.manual_seed(0)
    model = apply_block_options(MoETransformer(cfg.model), cfg.train)
    tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(1))
    mm_calls = []

    class CountMM(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                mm_calls.append(func)
            return func(*args, **(kwargs or {}))

    _, aux = model(tokens[:, :-1], tokens[:, 1:])
    with CountMM():
        (aux["lm_loss"] + aux["aux_loss"]).backward()
    grads = {n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()}
    return aux["lm_loss"].detach(), grads, len(mm_calls)


def test_selective_checkpointing_computes_the_same_and_recomputes_no_gemm():
    loss0, grads0, mm_none = _grads(None)
    loss_full, grads_full, mm_full = _grads("full")
    loss_sel, grads_sel, mm_sel = _grads("selective")
    assert loss0 == loss_full == loss_sel
    for name, g in grads0.items():
        torch.testing.assert_close(grads_sel[name], g, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(grads_full[name], g, rtol=0, atol=0, msg=name)
    assert mm_full > mm_none  # full checkpointing reruns the forward's GEMMs in the backward
    assert mm_sel == mm_none  # selective keeps them


def test_unknown_policy_is_refused_by_the_config():
    from shared.config import ConfigError

    with pytest.raises(ConfigError, match="activation_checkpointing_policy"):
        load_config("configs/tiny.yaml", ["train.activation_checkpointing_policy=some"])
