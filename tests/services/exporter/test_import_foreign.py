"""`moelab import` of third-party folders written by `transformers` itself (GLM-4-MoE, DeepSeek-V3,
Llama): moelab's model of the import computes transformers' logits within 1e-4 (fp32) with equal greedy
continuations; what moelab cannot represent exactly is refused naming the field or file, with nothing
written at OUT_RUN."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

import services.exporter.importer as importer_mod
from services.exporter.importer import ImportRefused, import_hf
from services.exporter.roundtrip import fixed_batch, hf_greedy, load_hf
from shared.checkpoint import load_trained_model
from shared.model.generate import SamplingConfig, generate
from tests.services.exporter.foreign_folders import foreign_folder


@pytest.mark.parametrize(("arch", "overrides"), [
    ("Glm4MoeForCausalLM", {}),
    ("DeepseekV3ForCausalLM", {}),
    ("DeepseekV3ForCausalLM", {"q_lora_rank": None, "rope_interleave": False}),  # full-rank q, rotate-half RoPE
    ("LlamaForCausalLM", {}),  # tied embeddings
])
def test_a_transformers_made_folder_imports_as_the_same_function(tmp_path, arch, overrides):
    folder = foreign_folder(tmp_path, arch, **overrides)
    ckpt = import_hf(folder, tmp_path / "run")
    trained = load_trained_model(tmp_path / "run", require_tokenizer=True)
    assert trained.checkpoint == ckpt and trained.step == 0
    hf = load_hf(folder)
    batch = fixed_batch(trained.cfg.model.vocab_size, 64, length=48)
    with torch.no_grad():
        diff = (trained.model(batch)[0] - hf(batch).logits).abs().max().item()
    assert diff <= 1e-4
    prompt = trained.require_tokenizer().encode("The for statement is used")
    ours = generate(trained.model, prompt, SamplingConfig(max_new_tokens=24)).tokens
    assert ours == hf_greedy(hf, prompt, 24)
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["architecture"] == arch and meta["round_trip"]["greedy_equal"]
    model = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert model["mup"]["enabled"] is False and model["vocab_size"] == 512
    if arch == "LlamaForCausalLM":
        assert model["ffn"] == "dense" and model["tie_embeddings"] is True and model["dense_hidden"] == 128
    else:
        assert model["moe"]["route_scale"] == 1.5 and model["moe"]["n_groups"] == 2 and model["moe"]["bungee"]["enabled"] is False
        bias = trained.model.layers[1].ffn.router
        assert torch.equal(bias.expert_bias_E, bias.expert_bias_avg_E) and bias.expert_bias_E.abs().sum() > 0


@pytest.mark.parametrize(("arch", "overrides", "named"), [
    ("Glm4MoeForCausalLM", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},  # GLM's default: half
     r"rope_parameters.partial_rotary_factor = 0.5"),
    ("LlamaForCausalLM", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     r"rope_parameters.rope_type = 'linear'"),
    ("DeepseekV3ForCausalLM", {"scoring_func": "softmax"}, r"scoring_func = 'softmax'"),
    ("DeepseekV3ForCausalLM", {"rms_norm_eps": 1e-5}, r"rms_norm_eps = 1e-05.*fixed"),
    ("Glm4MoeForCausalLM", {"use_qk_norm": True}, r"use_qk_norm = True"),
    ("Glm4MoeForCausalLM", {"attention_bias": True}, r"attention_bias = True"),
    ("Glm4MoeForCausalLM", {"num_experts_per_tok": 1}, r"norm_topk_prob = True.*num_experts_per_tok 1"),
    ("LlamaForCausalLM", {"hidden_act": "gelu"}, r"hidden_act = 'gelu'"),
])
def test_what_moelab_cannot_represent_is_refused_naming_the_field(tmp_path, arch, overrides, named):
    folder = foreign_folder(tmp_path, arch, weights=False, tokenizer=False, **overrides)
    with pytest.raises(ImportRefused, match=f"config.json: {named}"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_another_architecture_is_refused_naming_model_type(tmp_path):
    import transformers

    folder = tmp_path / "mixtral"
    transformers.MixtralConfig(hidden_size=64, num_hidden_layers=1).save_pretrained(folder)
    with pytest.raises(ImportRefused, match=r"model_type = 'mixtral'.*only \['deepseek_v3', 'glm4_moe', 'llama'\]"):
        import_hf(folder, tmp_path / "run")


def test_a_missing_tokenizer_or_end_of_text_token_is_refused_naming_the_file(tmp_path):
    folder = foreign_folder(tmp_path, "LlamaForCausalLM", tokenizer=False)
    with pytest.raises(ImportRefused, match=f"{folder / 'tokenizer.json'}: missing"):
        import_hf(folder, tmp_path / "run")
    from tests.services.exporter.foreign_folders import write_tokenizer

    write_tokenizer(folder, tmp_path / "tok")
    tok_config = folder / "tokenizer_config.json"
    tok_config.write_text(json.dumps({k: v for k, v in json.loads(tok_config.read_text()).items() if k != "eos_token"}))
    with pytest.raises(ImportRefused, match=f"{tok_config}: no eos_token"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run.tmp-*"))


def test_missing_weights_are_refused_not_left_at_random_init(tmp_path):
    folder = foreign_folder(tmp_path, "Glm4MoeForCausalLM")
    weights = load_file(str(folder / "model.safetensors"))
    dropped = next(k for k in weights if k.endswith("post_attention_layernorm.weight"))
    save_file({k: v for k, v in weights.items() if k != dropped}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ImportRefused, match="weights missing for Glm4MoeForCausalLM"):
        import_hf(folder, tmp_path / "run")


def test_a_mapping_that_changes_the_function_fails_the_import_check_and_writes_nothing(tmp_path, monkeypatch):
    folder = foreign_folder(tmp_path, "DeepseekV3ForCausalLM")
    real = importer_mod.from_hf

    def off_by_a_little(*args, **kwargs):  # a setting the reader missed: the final norm off by 1%
        state = real(*args, **kwargs)
        state["norm.weight"] = state["norm.weight"] * 1.01
        return state

    monkeypatch.setattr(importer_mod, "from_hf", off_by_a_little)
    with pytest.raises(ImportRefused, match=r"transformers' model does not compute moelab's function: max \|Δlogit\|"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run.tmp-*"))


def test_cli_imports_a_foreign_folder(tmp_path):
    from typer.testing import CliRunner

    from moelab.cli import app

    folder = foreign_folder(tmp_path, "LlamaForCausalLM")
    done = CliRunner().invoke(app, ["import", str(folder), str(tmp_path / "run")])
    assert done.exit_code == 0, done.output
    assert "step_00000000" in done.output
    refused = CliRunner().invoke(app, ["import", str(tmp_path / "nowhere"), str(tmp_path / "run2")])
    assert refused.exit_code == 1 and "no such folder" in refused.output
