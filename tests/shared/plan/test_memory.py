"""`moelab plan`: parameter memory as `moelab precision-report` counts it, a hand count, sharding,
and a refusal for a plan that cannot fit."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from moelab.cli import app
from shared.config import load_config
from shared.plan.memory import GIB, RESERVE_BYTES, plan_memory

runner = CliRunner()


def _precision_report(config: str, *overrides: str) -> dict:
    res = runner.invoke(app, ["precision-report", config, *overrides, "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    return next(r for r in rows if r["expert"] == "bf16" and r["master"] == "fp32")


@pytest.mark.parametrize("config,overrides", [
    ("configs/tiny.yaml", ["train.dtype=bfloat16"]),
    ("configs/proxy-7b2a.yaml", ["train.activation_checkpointing=false"]),
])
def test_one_gpu_parameter_memory_is_what_precision_report_prints(config, overrides):
    report = _precision_report(config, *overrides)
    plan = plan_memory(load_config(config, overrides))
    params = sum(plan.parts[k] for k in ("weights", "grads", "optimizer", "lowp_copies"))
    assert plan.params == report["params"]
    assert params / GIB == pytest.approx(report["model_gib"], rel=1e-9)


def test_hand_count_for_a_small_config():
    """vocab 256, d 32, 2 layers (dense first, then MoE of 4 experts × 16, top-2, 1 shared), 2 heads / 1 KV
    head, bf16 autocast, one GPU, micro-batch 1 × 8 tokens, optim.log_stats off."""
    cfg = load_config("configs/tiny.yaml", [
        "model.vocab_size=256", "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.n_kv_heads=1",
        "model.first_k_dense=1", "model.moe.n_routed_experts=4", "model.moe.expert_hidden=16", "model.moe.top_k=2",
        "model.moe.n_shared_experts=1", "train.dtype=bfloat16", "train.micro_batch_size=1", "train.seq_len=8",
        "optim.log_stats=false"])
    d, v, hd = 32, 256, 16
    attn = d * 2 * hd + 2 * d * hd + 2 * hd * d  # wq, wk+wv (one KV head), wo: 3072
    dense_ffn = 3 * d * (16 * 3)  # the dense layer is as wide as shared + top-k experts: 4608
    routed, shared, router = 4 * 3 * 16 * d, 3 * d * 16, 4 * d  # 6144, 1536, 128
    norms, bungee, embed, head = 5 * d, 1, v * d, v * d  # four block norms + final norm: 160
    muon = 2 * attn + dense_ffn + routed + shared  # hidden matrices and experts: 18432
    adamw = router + norms + bungee + embed + head  # 16673
    total = muon + adamw
    plan = plan_memory(cfg)
    assert plan.params == total == 35105
    assert plan.parts["weights"] == plan.parts["grads"] == 4 * total
    assert plan.parts["optimizer"] == 4 * muon + 8 * adamw
    assert plan.parts["lowp_copies"] == 2 * total  # one bf16 copy of every weight (precision-report's rule)
    # activations per token (a = 2 bytes, f = 4): norms 2·(32+1)·4 = 264 per block;
    # attention: 3 casts of x (3·32·2) + q, out (2·2·16) and k, v (2·1·16) at 2 bytes + lse 2·4 = 392
    attention = 3 * d * 2 + (2 * 2 * hd + 2 * 1 * hd) * 2 + 2 * 4
    assert attention == 392
    dense = 2 * d * 2 + 4 * 48 * 2  # two casts of x, then w1·x, silu, w3·x, their product (width 48)
    # MoE: fp32 input + router's cast, router scalars (2E + K + 7)·2 + K int64 choices, then per
    # assignment (K = 2) x, gate|up, silu, product, weighted product, output ((2·32 + 5·16 + 1)·2)
    # and three int64 indices, and the shared expert as a dense SwiGLU of width 16
    moe = d * 4 + d * 2 + (2 * 4 + 2 + 7) * 2 + 2 * 8 + 2 * ((2 * d + 5 * 16 + 1) * 2 + 3 * 8) + (2 * d * 2 + 4 * 16 * 2)
    head_peak = (d + 1) * 4 + d * 2 + v * 4 + v * (2 * 2 + 2 * 4)  # norm, h, log-softmax; logits and grads
    per_token = 2 * 264 + 2 * attention + dense + moe + head_peak
    assert plan.parts["activations"] == per_token * 8
    largest = 4 * 16 * d  # one stacked expert tensor (E·F·D) beats the dense FFN's 48·32 matrix
    step = 4 * 4 * largest + 4 * adamw  # Newton–Schulz buffers + one fp32 AdamW temporary
    assert plan.parts["transients"] == max(0.0, step - plan.parts["lowp_copies"] - plan.parts["activations"])
    rest = sum(v for k, v in plan.parts.items() if k != "reserve")
    assert plan.parts["reserve"] == pytest.approx(RESERVE_BYTES + 0.05 * rest)


def test_eight_gpus_shard_dense_weights_with_fsdp_and_experts_with_expert_parallel():
    one = plan_memory(load_config("configs/proxy-16b4a.yaml", ["train.workers=1", "train.dp_size=1", "train.ep_size=1"]))
    eight = plan_memory(load_config("configs/proxy-16b4a.yaml"))
    assert eight.gpus == 8 and eight.parts["weights"] == pytest.approx(one.parts["weights"] / 8)
    assert eight.parts["optimizer"] == pytest.approx(one.parts["optimizer"] / 8)
    # bf16 casts of the weights FSDP gathers are not sharded; the local experts' are
    assert one.parts["lowp_copies"] / 8 < eight.parts["lowp_copies"] < one.parts["lowp_copies"]


def test_plan_prints_every_part_and_refuses_a_plan_that_cannot_fit():
    ok = runner.invoke(app, ["plan", "configs/proxy-7b2a.yaml", "--gpu-mem", "141"])
    assert ok.exit_code == 0, ok.output
    for part in ("weights", "grads", "optimizer", "lowp_copies", "activations", "transients", "reserve", "fits:"):
        assert part in ok.output
    refused = runner.invoke(app, ["plan", "configs/proxy-7b2a.yaml", "--gpu-mem", "80"])
    assert refused.exit_code == 1 and "DOES NOT FIT" in refused.output
    assert "refused:" in refused.output and "train.activation_checkpointing" in refused.output
    js = runner.invoke(app, ["plan", "configs/proxy-16b4a.yaml", "--gpus", "8", "--gpu-mem", "80", "--json"])
    assert js.exit_code == 0 and json.loads(js.output)["fits"] is True


def test_plan_names_a_gpu_count_the_parallel_layout_cannot_use():
    res = runner.invoke(app, ["plan", "configs/proxy-16b4a.yaml", "--gpus", "12", "--gpu-mem", "80"])
    assert res.exit_code == 2 and "ep_size (8) must divide workers (12)" in res.output


@pytest.mark.gpu
def test_plan_bounds_the_measured_peak_of_a_real_training_step():
    """One step as the trainer runs it (bf16 autocast, Muon + AdamW, next-token loss) on the GPU:
    the plan is an upper bound that is not loose by more than 2×."""
    from shared.model import MoETransformer
    from shared.optim import build_optimizer

    cfg = load_config("configs/tiny.yaml", [
        "model.vocab_size=32768", "model.d_model=512", "model.n_layers=4", "model.n_heads=8", "model.n_kv_heads=2",
        "model.max_seq_len=1024", "model.moe.n_routed_experts=16", "model.moe.expert_hidden=256",
        "model.moe.top_k=4", "train.seq_len=1024", "train.micro_batch_size=4", "train.dtype=bfloat16"])
    torch.cuda.reset_peak_memory_stats()
    model = MoETransformer(cfg.model).cuda()
    opt = build_optimizer(model, cfg.optim, 10)
    tokens = torch.randint(0, cfg.model.vocab_size, (4, 1025), device="cuda")
    for _ in range(2):  # the optimizer state exists from the first step on
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, aux = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        (loss + aux["aux_loss"]).backward()
        opt.step()
        opt.zero_grad()
        del logits, loss
    measured = torch.cuda.max_memory_allocated()
    planned = plan_memory(cfg)
    without_reserve = planned.total - planned.parts["reserve"]
    assert 0.5 * without_reserve <= measured <= planned.total, (measured / GIB, planned.to_json())
