"""Muon + AdamW: group rules, orthogonal updates, muP multipliers, schedules, checkpoint round-trip."""

from __future__ import annotations

import io

import pytest
import torch

from shared.config import load_config
from shared.config.optim import OptimConfig
from shared.model.transformer import MoETransformer
from shared.optim import Muon, build_optimizer, lr_factor, newton_schulz


def _tiny(overrides=()):
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides])
    torch.manual_seed(0)
    return cfg, MoETransformer(cfg.model)


def _train_step(model, opt, seed):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 16), generator=gen)
    opt.zero_grad()
    logits, aux = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()) + aux["aux_loss"]
    loss.backward()
    return opt.step()


def test_every_parameter_in_exactly_one_group_with_experts_in_muon():
    cfg, model = _tiny()
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    seen = [n for pg in opt.param_groups for n in pg["names"]]
    assert sorted(seen) == sorted(n for n, _ in model.named_parameters())
    assert len(seen) == len(set(seen))
    ids = [id(p) for pg in opt.param_groups for p in pg["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    where = {n: pg["label"].split("/")[0] for pg in opt.param_groups for n in pg["names"]}
    experts = [n for n in where if n.endswith(("w1_EFD", "w2_EDF", "w3_EFD"))]
    assert experts and all(where[n] == "muon" for n in experts)
    assert all(where[n] == "muon" for n in where if ".attn.w" in n)
    for n, p in model.named_parameters():
        if p.dim() < 2 or any(k in n for k in ("tok_embeddings", "lm_head", "router", "norm", "bungee")):
            assert where[n] == "adamw", n


@pytest.mark.parametrize("patterns, router_decays", [(None, False), ("[]", True)])
def test_the_router_is_kept_out_of_weight_decay_unless_asked(patterns, router_decays):
    """A decayed router shrinks until the balancing bias alone picks the experts (every token the
    same ones): by default its matrix has no decay, while the other matrices keep theirs."""
    cfg, model = _tiny([] if patterns is None else [f"optim.no_decay_patterns={patterns}"])
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    decay = {n: pg["weight_decay"] > 0 for pg in opt.param_groups for n in pg["names"]}
    routers = [n for n in decay if n.endswith("router.weight_ED")]
    assert routers and all(decay[n] is router_decays for n in routers)
    assert all(decay[n] for n in decay if n.endswith(("w1_EFD", "lm_head.weight")))


def test_adamw_only_config_puts_everything_in_adamw():
    cfg, model = _tiny(["optim.name=adamw"])
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    assert list(opt.optimizers) == ["adamw"]


def test_newton_schulz_update_is_orthogonal_for_matrices_and_each_expert():
    torch.manual_seed(0)
    g = torch.randn(4, 48, 96) * torch.tensor([1e-3, 1.0, 50.0, 3.0])[:, None, None]  # very different scales
    o = newton_schulz(g, steps=5)
    sv = torch.linalg.svdvals(o)
    # Muon's quintic maps every singular value into ≈ [0.7, 1.2] (Jordan 2024), not exactly 1
    assert sv.min() > 0.6 and sv.max() < 1.25
    # batched = each expert orthogonalised on its own
    for e in range(4):
        torch.testing.assert_close(o[e], newton_schulz(g[e], steps=5), rtol=1e-4, atol=1e-5)
    gram = o[1] @ o[1].t()
    assert (gram - torch.eye(48)).abs().max() < 0.45
    tall = newton_schulz(torch.randn(80, 20))
    assert torch.linalg.svdvals(tall).min() > 0.6


def test_muon_matches_torch_muon_on_a_matrix():
    torch.manual_seed(1)
    w0 = torch.randn(32, 64)
    grads = [torch.randn(32, 64) for _ in range(3)]
    ours, ref = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    o = Muon([ours], lr=0.02, weight_decay=0.1, adjust_lr="match_rms_adamw", ns_dtype="bf16")
    r = torch.optim.Muon([ref], lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    for g in grads:
        ours.grad, ref.grad = g.clone(), g.clone()
        o.step()
        r.step()
    step_ours, step_ref = ours.detach() - w0, ref.detach() - w0
    assert (step_ours - step_ref).norm() / step_ref.norm() < 0.03


def test_muon_rejects_vectors():
    with pytest.raises(ValueError, match="2-D matrices or 3-D"):
        Muon([torch.nn.Parameter(torch.ones(3))])


def test_mup_multipliers_scale_matrix_lrs_from_the_model():
    cfg, model = _tiny(["model.d_model=128", "model.mup.base_width=64", "optim.name=adamw"])
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    by_name = {n: pg for pg in opt.param_groups for n in pg["names"]}
    # d_model doubles, expert width stays: w1 (fan-in d_model) ×1/2, w2 (fan-in the expert width) ×1
    assert by_name["layers.1.ffn.experts.w1_EFD"]["lr_mult"] == pytest.approx(0.5)
    assert by_name["layers.1.ffn.experts.w2_EDF"]["lr_mult"] == pytest.approx(1.0)
    assert by_name["tok_embeddings.weight"]["lr_mult"] == 1.0
    _train_step(model, opt, 0)
    base = opt.cfg.lr * lr_factor(0, 10, opt.cfg)
    assert by_name["layers.1.ffn.experts.w1_EFD"]["lr"] == pytest.approx(0.5 * base)


def test_muon_lr_ratio_scales_the_muon_matrices_only_and_keeps_decay_independent():
    _, model = _tiny(["model.d_model=128", "model.mup.base_width=64"])
    cfg_one, _ = _tiny(["model.d_model=128", "model.mup.base_width=64"])
    cfg_split, _ = _tiny(["model.d_model=128", "model.mup.base_width=64", "optim.muon_lr_ratio=0.5"])
    groups = {}
    for key, cfg in (("one", cfg_one), ("split", cfg_split)):
        opt = build_optimizer(model, cfg.optim, total_steps=10)
        groups[key] = {n: pg for pg in opt.param_groups for n in pg["names"]}
    one, split = groups["one"], groups["split"]
    assert one.keys() == split.keys()
    muon = [n for n in one if n.endswith(("wq.weight", "w1_EFD", "w2_EDF"))]
    assert muon and all(split[n]["lr_mult"] == pytest.approx(0.5 * one[n]["lr_mult"]) for n in muon)
    for n in ("tok_embeddings.weight", "lm_head.weight", "layers.1.ffn.router.weight_ED", "norm.weight"):
        assert split[n]["lr_mult"] == one[n]["lr_mult"]
    # independent decay: the per-step shrink lr·multiplier·wd stays base_lr·wd whatever the ratio
    n = "layers.1.ffn.experts.w1_EFD"
    assert split[n]["lr_mult"] * split[n]["weight_decay"] == pytest.approx(one[n]["lr_mult"] * one[n]["weight_decay"])


@pytest.mark.parametrize("schedule", ["cosine", "wsd", "constant"])
def test_schedules_warm_up_then_follow_their_shape(schedule):
    cfg = OptimConfig(schedule=schedule, warmup_steps=10, min_lr_ratio=0.1, decay_fraction=0.2)
    f = [lr_factor(s, 100, cfg) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a <= b + 1e-12 for a, b in zip(f[:10], f[1:10], strict=False))
    if schedule == "constant":
        assert f[-1] == 1.0
    elif schedule == "cosine":
        assert f[-1] == pytest.approx(0.1) and f[55] == pytest.approx(0.55, abs=0.02)
    else:
        assert f[79] == 1.0 and f[-1] == pytest.approx(0.1) and f[90] == pytest.approx(0.55, abs=0.06)


def test_clipping_is_off_by_default_and_bounds_the_norm_when_set():
    cfg, model = _tiny(["optim.lr=1e-9"])
    assert cfg.optim.grad_clip is None
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    stats = _train_step(model, opt, 0)
    unclipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]))
    assert unclipped == pytest.approx(stats["grad_norm"], rel=1e-5)
    cfg2, model2 = _tiny(["optim.lr=1e-9", "optim.grad_clip=0.01"])
    opt2 = build_optimizer(model2, cfg2.optim, total_steps=10)
    _train_step(model2, opt2, 0)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model2.parameters() if p.grad is not None]))
    assert clipped == pytest.approx(0.01, rel=1e-3)


def test_step_reports_grad_norm_and_update_rms_per_group():
    cfg, model = _tiny()
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    stats = _train_step(model, opt, 0)
    for pg in opt.param_groups:
        assert stats[f"grad_norm/{pg['label']}"] > 0
        assert stats[f"update_rms/{pg['label']}"] > 0


def test_optimizer_state_round_trips_through_a_checkpoint():
    cfg, model = _tiny()
    opt = build_optimizer(model, cfg.optim, total_steps=20)
    for s in range(3):
        _train_step(model, opt, s)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    _, resumed = _tiny()
    resumed.load_state_dict(ckpt["model"])
    opt2 = build_optimizer(resumed, cfg.optim, total_steps=20)
    opt2.load_state_dict(ckpt["optim"])
    assert opt2.step_count == 3
    for s in range(3, 5):
        _train_step(model, opt, s)
        _train_step(resumed, opt2, s)
    for (n, a), (_, b) in zip(model.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


def test_bf16_master_weights_stay_on_the_bf16_grid():
    cfg, model = _tiny(["model.moe.precision.master_weights=bf16"])
    opt = build_optimizer(model, cfg.optim, total_steps=10)
    assert opt.master_weights == "bf16"
    _train_step(model, opt, 0)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), p.detach().bfloat16().float()), n
