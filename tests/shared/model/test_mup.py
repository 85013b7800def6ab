"""muP per matrix: each weight's init and Adam LR multiplier follow its own fan-in against the base model."""

from __future__ import annotations

import math

import pytest

from shared.config import ConfigError, load_config
from shared.model import MoETransformer


def _model(*overrides: str):
    cfg = load_config("configs/tiny.yaml", ["model.n_layers=2", "model.vocab_size=256", *overrides]).model
    return cfg, MoETransformer(cfg)


def test_every_multiplier_is_one_at_the_base_shapes():
    _, model = _model("model.attention.pattern=[gqa,kda]")
    for name, s in model.mup_scalings.items():
        assert s.init_multiplier == 1.0 and s.adam_lr_multiplier == 1.0, name


def test_expert_down_projection_follows_its_own_fan_in_not_d_model():
    """d_model ×4 and expert width ×2: w2's fan-in is the expert width, so its LR is ×1/2 (not ×1/4)
    and its init std ×1/√2; w1's fan-in is d_model: ×1/4 and ×1/2."""
    _, model = _model("model.d_model=256", "model.n_heads=16", "model.n_kv_heads=8", "model.moe.expert_hidden=128",
                      "model.mup.base_shapes={n_heads: 4, n_kv_heads: 2, moe.expert_hidden: 64}")
    w1 = model.mup_scalings["layers.1.ffn.experts.w1_EFD"]
    w2 = model.mup_scalings["layers.1.ffn.experts.w2_EDF"]
    assert (w1.shape_class, w2.shape_class) == ("hidden", "hidden")
    assert w1.adam_lr_multiplier == pytest.approx(1 / 4) and w1.init_multiplier == pytest.approx(1 / 2)
    assert w2.adam_lr_multiplier == pytest.approx(1 / 2) and w2.init_multiplier == pytest.approx(2**-0.5)
    std = model.layers[1].ffn.experts.w2_EDF.std().item()
    assert std == pytest.approx(0.02 * 2**-0.5, rel=0.05)
    assert model.lr_multipliers()["layers.1.ffn.experts.w2_EDF"] == pytest.approx(0.5)


def test_router_is_an_output_layer_and_low_rank_up_projections_are_input_layers():
    """A width → fixed-size map (router logits, a KDA gate's down-projection) is muP's output layer:
    init and LR × 1/m. A fixed-rank → width map (the gate's up-projection) is an input layer: × 1."""
    _, model = _model("model.d_model=128", "model.attention.pattern=[kda,mla]", "model.moe.expert_hidden=128",
                      "model.mup.base_shapes={moe.expert_hidden: 64}")
    s = model.mup_scalings
    router = s["layers.1.ffn.router.weight_ED"]
    assert router.shape_class == "output" and router.init_multiplier == pytest.approx(0.5)
    assert router.adam_lr_multiplier == pytest.approx(0.5)
    assert s["layers.0.attn.f_down.weight"].shape_class == "output"
    up = s["layers.0.attn.f_up.weight"]
    assert up.shape_class == "input" and up.init_multiplier == 1.0 and up.adam_lr_multiplier == 1.0
    mla_up = s["layers.1.attn.wkv_b.weight"]  # fixed kv rank → fixed head dims: nothing grows
    assert mla_up.shape_class == "finite" and mla_up.adam_lr_multiplier == 1.0


def test_conv_kernels_and_vectors_keep_their_init_and_lr():
    _, model = _model("model.d_model=128", "model.attention.pattern=[kda]")
    for name, s in model.mup_scalings.items():
        if "conv" in name:
            assert s.role == "conv" and s.adam_lr_multiplier == 1.0, name
        if "norm" in name or "bungee" in name:
            assert s.role == "vector" and s.adam_lr_multiplier == 1.0, name


def test_head_takes_the_output_rule_as_a_forward_multiplier():
    _, model = _model("model.d_model=128")
    head = model.mup_scalings["lm_head.weight"]
    assert head.role == "head" and head.adam_lr_multiplier == 1.0
    assert model.logit_mult == pytest.approx(0.125 / 2)
    assert model.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_standard_parameterisation_has_no_multipliers():
    _, model = _model("model.d_model=128", "model.mup.enabled=false")
    assert all(s.adam_lr_multiplier == 1.0 and s.init_multiplier == 1.0 for s in model.mup_scalings.values())
    assert model.logit_mult == 1.0 and model.emb_mult == 1.0
    assert math.isclose(model.layers[1].ffn.experts.w1_EFD.std().item(), 0.02, rel_tol=0.05)


def test_base_shapes_accept_only_width_fields():
    with pytest.raises(ConfigError, match="not width fields"):
        load_config("configs/tiny.yaml", ["model.mup.base_shapes={n_layers: 2}"])
    with pytest.raises(ConfigError, match="must be >= 1"):
        load_config("configs/tiny.yaml", ["model.mup.base_shapes={moe.expert_hidden: 0}"])


def test_proxy_7b2a_expert_down_projection_scales_by_the_expert_width():
    """At proxy-7b2a's shape (d_model ×40, expert width ×8 over the tiny base) the expert
    down-projection's Adam LR multiplier is 1/8 (a d_model rule would give 1/40) and its init ×1/√8."""
    import torch

    cfg = load_config("configs/proxy-7b2a.yaml").model
    with torch.device("meta"):
        model = MoETransformer(cfg)
    w2 = model.mup_scalings["layers.1.ffn.experts.w2_EDF"]
    assert w2.adam_lr_multiplier == pytest.approx(1 / 8) and w2.init_multiplier == pytest.approx(8**-0.5)
    assert model.mup_scalings["layers.1.ffn.experts.w1_EFD"].adam_lr_multiplier == pytest.approx(1 / 40)
    assert model.mup_scalings["layers.0.attn.wq.weight"].shape_class == "hidden"
