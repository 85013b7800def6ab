"""Optimizer-aware muP LR multipliers: Muon's spectral rule vs Adam's 1/fan-in rule."""

from __future__ import annotations

import pytest

from shared.config import load_config
from shared.model import MoETransformer
from shared.model.mup import ParamScaling
from shared.optim import build_optimizer, muon_lr_multiplier


def test_muon_square_hidden_matrix_scales_as_one_over_root_width():
    s = ParamScaling("matrix", fan_in=256, fan_out=256, base_fan_in=64, base_fan_out=64)
    assert s.adam_lr_multiplier == pytest.approx(1 / 4)
    assert muon_lr_multiplier(s, "match_rms_adamw") == pytest.approx(1 / 2)
    assert muon_lr_multiplier(s, "original") == pytest.approx(1.0)  # Keller's scale already is spectral


def test_muon_rectangular_matrix_keeps_the_spectral_step_of_the_base():
    """‖ΔW‖ per unit LR ∝ 0.2·√max(A,B); the target is √(A/B): the multiplier is their ratio vs the base."""
    s = ParamScaling("matrix", fan_in=2560, fan_out=512, base_fan_in=64, base_fan_out=64)
    base_step = 0.2 * 64**0.5 / 1.0
    step = 0.2 * 2560**0.5 / (512 / 2560) ** 0.5
    assert muon_lr_multiplier(s, "match_rms_adamw") == pytest.approx(base_step / step)


def test_non_matrices_take_one_under_both_optimizers():
    s = ParamScaling("conv")
    assert muon_lr_multiplier(s, "match_rms_adamw") == 1.0 and s.adam_lr_multiplier == 1.0


def test_groups_use_each_optimizers_own_rule():
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.d_model=256",
                                            "model.n_heads=16", "model.n_kv_heads=8", "model.moe.expert_hidden=256",
                                            "model.mup.base_shapes={n_heads: 4, n_kv_heads: 2, moe.expert_hidden: 64}", "optim.lr_scales={}"])
    model = MoETransformer(cfg.model)
    muon = {n: pg for pg in build_optimizer(model, cfg.optim, 10).param_groups for n in pg["names"]}
    assert muon["layers.1.ffn.experts.w1_EFD"]["lr_mult"] == pytest.approx(0.5)  # 1/√4
    assert muon["layers.1.ffn.router.weight_ED"]["lr_mult"] == pytest.approx(0.25)  # AdamW: output layer 1/m
    adam_cfg = cfg.optim.model_copy(update={"name": "adamw"})
    adam = {n: pg for pg in build_optimizer(model, adam_cfg, 10).param_groups for n in pg["names"]}
    assert adam["layers.1.ffn.experts.w1_EFD"]["lr_mult"] == pytest.approx(0.25)


def test_kda_conv_kernels_go_to_adamw_not_muon():
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.attention.pattern=[kda]"])
    model = MoETransformer(cfg.model)
    where = {n: pg["label"].split("/")[0] for pg in build_optimizer(model, cfg.optim, 10).param_groups for n in pg["names"]}
    convs = [n for n in where if ".conv" in n]
    assert convs and all(where[n] == "adamw" for n in convs)


def test_lr_scales_multiply_matching_parameters_on_top_of_mup():
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "optim.lr_scales={router: 0.1}"])
    model = MoETransformer(cfg.model)
    by = {n: pg for pg in build_optimizer(model, cfg.optim, 10).param_groups for n in pg["names"]}
    assert by["layers.1.ffn.router.weight_ED"]["lr_mult"] == pytest.approx(0.1)
    assert by["layers.1.ffn.experts.w1_EFD"]["lr_mult"] == pytest.approx(1.0)


@pytest.mark.parametrize("scaling", ["independent", "coupled"])
def test_weight_decay_strength_follows_decay_scaling(scaling):
    """Independent decay shrinks every matrix by base_lr·wd per step whatever its muP multiplier;
    coupled decay (torch's) multiplies the shrink by the multiplier too."""
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", "model.d_model=256",
                                            "model.n_heads=16", "model.n_kv_heads=8", f"optim.decay_scaling={scaling}"])
    opt = build_optimizer(MoETransformer(cfg.model), cfg.optim, 10)
    for pg in opt.param_groups:
        if pg["weight_decay"] > 0:
            want = cfg.optim.weight_decay if scaling == "independent" else cfg.optim.weight_decay * pg["lr_mult"]
            assert pg["lr_mult"] * pg["weight_decay"] == pytest.approx(want)
