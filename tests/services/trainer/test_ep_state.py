"""Expert-parallel checkpoints hold every rank's experts and are not tied to the layout that wrote
them: an EP=2 run resumed is bitwise the uninterrupted run, and EP=2 ↔ EP=1 resume on the same
two workers continue the same run (2 gloo processes, the real training loop)."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from services.trainer.launch import spawn_local
from services.trainer.loop import run_dir
from services.trainer.metrics import read_metrics
from tests.services.trainer.conftest import tiny_cfg

pytestmark = pytest.mark.slow
STEPS, CUT = 6, 3


def _cfg(tmp_path, doc_globs, name: str, ep_size: int, *extra: str):
    return tiny_cfg(tmp_path, doc_globs, f"train.run_name={name}", "train.workers=2", "train.dp_size=2",
                    f"train.ep_size={ep_size}", f"train.steps={STEPS}", f"train.checkpoint_every={CUT}",
                    "train.keep_last=3", "train.eval_every=100", *extra)


def _resume_from(tmp_path, doc_globs, source, name: str, ep_size: int):
    """A new run whose only checkpoint is `source`'s at step CUT, resumed at `ep_size`."""
    cfg = _cfg(tmp_path, doc_globs, name, ep_size)
    ckpts = run_dir(cfg) / "checkpoints"
    ckpts.mkdir(parents=True)
    shutil.copytree(run_dir(source) / "checkpoints" / f"step_{CUT:08d}", ckpts / f"step_{CUT:08d}")
    spawn_local(cfg, resume=True)
    return cfg


def _losses(cfg) -> dict[int, float]:
    return read_metrics(run_dir(cfg) / "metrics.jsonl")["loss"]


def _checkpoint(cfg, step: int, tmp_path) -> dict:
    out = tmp_path / f"{cfg.train.run_name}-{step}.pt"
    dcp_to_torch_save(str(run_dir(cfg) / "checkpoints" / f"step_{step:08d}"), str(out))
    return torch.load(out, weights_only=False)


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flat(v, f"{prefix}{k}.")
    elif isinstance(tree, torch.Tensor):
        yield prefix[:-1], tree


@pytest.fixture(scope="module")
def ep2_run(tmp_path_factory, doc_globs):
    tmp = tmp_path_factory.mktemp("ep")
    cfg = _cfg(tmp, doc_globs, "ep2", 2)
    spawn_local(cfg)
    return tmp, cfg


def test_ep2_checkpoint_holds_each_ranks_experts(ep2_run):
    tmp, cfg = ep2_run
    state = _checkpoint(cfg, CUT, tmp)
    w1 = state["model"]["layers.1.ffn.experts.w1_EFD"]
    assert w1.shape[0] == cfg.model.moe.n_routed_experts  # the global (E, F, D) tensor, not one rank's half
    half = w1.shape[0] // 2
    assert not torch.equal(w1[:half], w1[half:])
    assert "momentum_buffer" in state["optim"]["state"]["layers.1.ffn.experts.w1_EFD"]


def test_ep2_resumed_run_is_bitwise_the_uninterrupted_run(ep2_run, doc_globs):
    tmp, full = ep2_run
    resumed = _resume_from(tmp, doc_globs, full, "ep2-resumed", 2)
    want, got = _losses(full), _losses(resumed)
    assert sorted(got) == list(range(CUT, STEPS))
    assert all(got[s] == want[s] for s in got), (want, got)
    a, b = dict(_flat(_checkpoint(full, STEPS, tmp))), dict(_flat(_checkpoint(resumed, STEPS, tmp)))
    assert a.keys() == b.keys()
    assert any("expert_bias_E" in k for k in a) and any(".momentum_buffer" in k for k in a)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_ep2_checkpoint_resumes_at_ep1_on_the_same_workers(ep2_run, doc_globs):
    tmp, full = ep2_run
    resumed = _resume_from(tmp, doc_globs, full, "ep2-to-ep1", 1)
    want, got = _losses(full), _losses(resumed)
    assert sorted(got) == list(range(CUT, STEPS))
    torch.testing.assert_close(torch.tensor([got[s] for s in sorted(got)]), torch.tensor([want[s] for s in sorted(got)]),
                               rtol=0, atol=1e-5)


def test_ep1_checkpoint_resumes_at_ep2(tmp_path, doc_globs):
    full = _cfg(tmp_path, doc_globs, "ep1", 1)
    spawn_local(full)
    resumed = _resume_from(tmp_path, doc_globs, full, "ep1-to-ep2", 2)
    want, got = _losses(full), _losses(resumed)
    assert sorted(got) == list(range(CUT, STEPS))
    torch.testing.assert_close(torch.tensor([got[s] for s in sorted(got)]), torch.tensor([want[s] for s in sorted(got)]),
                               rtol=0, atol=1e-5)
