"""The config rails: recipes load, overrides apply, and every bad value names its field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from shared.config import ConfigError, ExperimentConfig, load_config, save_resolved

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"


def test_every_recipe_in_configs_loads():
    recipes = sorted((ROOT / "configs").glob("*.yaml"))
    assert recipes, "configs/ holds no recipe"
    for recipe in recipes:
        assert isinstance(load_config(recipe), ExperimentConfig)


def test_overrides_apply_with_yaml_typed_values():
    cfg = load_config(TINY, ["model.moe.top_k=4", "model.attention.pattern=[gqa, gqa]", "model.tie_embeddings=true"])
    assert cfg.model.moe.top_k == 4
    assert cfg.model.attention.pattern == ["gqa", "gqa"]
    assert cfg.model.tie_embeddings is True


def test_dense_twin_inherits_its_base_recipe():
    dense = load_config(ROOT / "configs" / "tiny-dense.yaml")
    tiny = load_config(TINY)
    assert dense.model.ffn == "dense"
    assert dense.model.d_model == tiny.model.d_model
    assert dense.model.resolved_dense_hidden == tiny.model.moe.expert_hidden * 3


def test_resolved_config_is_saved_and_reloads_identically(tmp_path):
    cfg = load_config(TINY, ["train.seed=7"])
    path = save_resolved(cfg, tmp_path / "run")
    again = ExperimentConfig.model_validate(yaml.safe_load(path.read_text()))
    assert again == cfg


def _all_sections(model: type[BaseModel], seen=None):
    seen = seen if seen is not None else set()
    if model in seen:
        return seen
    seen.add(model)
    from shared.config.loader import _find_model

    for field in model.model_fields.values():
        sub = _find_model(field.annotation)
        if sub is not None:
            _all_sections(sub, seen)
    return seen


def test_every_field_has_a_default_and_a_description():
    for section in _all_sections(ExperimentConfig):
        for name, field in section.model_fields.items():
            assert field.description, f"{section.__name__}.{name} has no description"
            if section.__name__ != "InputSource":  # a source entry is user data, not a knob
                assert not field.is_required(), f"{section.__name__}.{name} has no default"


BAD_CONFIGS = [
    # (overrides, the field path the message must name, a fragment of what is allowed)
    (["model.moe.top_k=16"], "model.moe", "top_k"),
    (["model.n_kv_heads=3"], "model", "n_kv_heads"),
    (["model.d_model=66", "model.n_heads=4"], "model", "n_heads"),
    (["model.moe.score_func=tanh"], "model.moe.score_func", "softmax"),
    (["model.d_modle=128"], "model.d_modle", "did you mean 'd_model'"),
    (["optim.lr=-1"], "optim.lr", "greater than 0"),
    (["optim.schedule=linear"], "optim.schedule", "cosine"),
    (["train.steps=0"], "train.steps", "greater than or equal to 1"),
    (["model.attention.pattern=[gqa, flash]"], "model.attention", "flash"),
    (["model.moe.n_groups=3"], "model.moe", "n_groups"),
    (["model.first_k_dense=9"], "model", "first_k_dense"),
    (["tracker.mode=sometimes"], "tracker.mode", "online"),
    (["mixture.rates={web: -0.5}"], "mixture.rates", "non-negative"),
    (["train.micro_batch_size=abc"], "train.micro_batch_size", "integer"),
    (["modle.d_model=3"], "modle", "did you mean 'model'"),
    (["tracker.port=70000"], "tracker.port", "65535"),
]


@pytest.mark.parametrize(("overrides", "field", "allowed"), BAD_CONFIGS, ids=[b[1] + ":" + b[0][0] for b in BAD_CONFIGS])
def test_bad_config_is_rejected_naming_the_field(overrides, field, allowed):
    with pytest.raises(ConfigError) as info:
        load_config(TINY, overrides)
    message = str(info.value)
    assert f"  {field}" in message, message
    assert allowed in message, message


def test_bad_override_syntax_and_missing_file_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="section.field=value"):
        load_config(TINY, ["model.moe.top_k"])
    with pytest.raises(ConfigError, match="is a value"):
        load_config(TINY, ["model.d_model.x=1"])
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_inheritance_cycle_is_reported(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


@pytest.mark.parametrize("backend", ["openai", "vllm"])
def test_each_language_model_oracle_takes_model_budget_and_constraint_from_the_one_model_section(backend):
    from shared.config.oracle_model import OracleModelSection
    from shared.config.scorer import OracleConfig

    section = OracleConfig.model_fields[backend].annotation
    assert issubclass(section, OracleModelSection)
    assert {k: section.model_fields[k].default for k in OracleModelSection.model_fields} == {
        k: f.default for k, f in OracleModelSection.model_fields.items()}
    with pytest.raises(ConfigError, match=rf"scorer\.oracle\.{backend}\.max_tokens = 8: Input should be greater than or equal to 16"):
        load_config(None, [f"scorer.oracle.{backend}.max_tokens=8"])
    cfg = load_config(None, [f"scorer.oracle.backend={backend}", f"scorer.oracle.{backend}.constraint=vllm_regex"])
    assert cfg.scorer.oracle.backend_section().constraint == "vllm_regex"


def test_a_mup_base_that_cannot_be_built_fails_at_load_with_the_fix():
    # 20 heads cannot split the base width of 64: found when a GPU benchmark built the model
    with pytest.raises(ConfigError, match=r"muP base model .*n_heads \(20\) must divide d_model \(64\).*mup.base_shapes"):
        load_config("configs/tiny.yaml", ["model.d_model=2560", "model.n_heads=20", "model.n_kv_heads=4"])
    cfg = load_config("configs/tiny.yaml", ["model.d_model=2560", "model.n_heads=20", "model.n_kv_heads=4",
                                            "model.mup.base_shapes={n_heads: 4, n_kv_heads: 2}"])
    base = cfg.model.mup_base()
    assert (base.d_model, base.n_heads, base.n_kv_heads, base.mup.enabled) == (64, 4, 2, False)
    load_config("configs/tiny.yaml", ["model.d_model=2560", "model.n_heads=20", "model.n_kv_heads=4",
                                      "model.mup.enabled=false"])  # no base model, nothing to check
