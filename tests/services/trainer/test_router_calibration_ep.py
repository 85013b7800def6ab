"""Calibration under expert parallelism: two gloo processes, each routing its own rows with the loads
summed over both, solve the bias one process solves on all rows."""

from __future__ import annotations

import torch

from services.trainer.parallel import apply_block_options, parallelize
from services.trainer.router_calibration import _sum_over_ranks
from shared.config import load_config
from shared.model import MoETransformer
from shared.model.router_frozen import Sequences, calibrate_biases, moe_routers
from tests.services.trainer.distributed import spawn

V = 128


def _calibrated_biases(rank: int, world: int) -> dict[str, torch.Tensor]:
    cfg = load_config(None, [
        f"model.vocab_size={V}", "model.d_model=32", "model.n_layers=3", "model.n_heads=2", "model.n_kv_heads=1",
        "model.max_seq_len=32", "model.first_k_dense=1", "model.moe.n_routed_experts=4", "model.moe.top_k=2",
        "model.moe.expert_hidden=16", f"train.workers={world}", f"train.dp_size={world}", f"train.ep_size={world}",
    ])
    torch.manual_seed(0)
    model = parallelize(apply_block_options(MoETransformer(cfg.model), cfg.train), cfg.train, rank, world)
    gen = torch.Generator().manual_seed(7)
    rows = torch.randint(0, V, (96, 33), generator=gen)
    mine = rows[rank::world]  # each rank its share of the stream, as the trainer's loader deals it
    seqs = Sequences(mine[:, :-1], mine[:, 1:], tuple("ab"[i % 2] for i in range(mine.shape[0])))
    calibrate_biases(model, seqs, eos_id=0, reduce=_sum_over_ranks(torch.device("cpu")), chunk=16, iters=120)
    return {f"layer{i}": r.expert_bias_avg_E.clone() for i, r in moe_routers(model).items()}


def test_two_process_expert_parallel_calibration_equals_one_process():
    single = _calibrated_biases(0, 1)
    double = spawn(_calibrated_biases)
    assert set(single) == set(double) == {"layer1", "layer2"}
    assert any(single[k].abs().max() > 0 for k in single)  # the calibration moved the bias
    for k in single:
        torch.testing.assert_close(torch.as_tensor(double[k]), single[k], rtol=0, atol=1e-6)
