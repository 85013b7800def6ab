"""`moelab config check` finds, naming the field, every config mistake a run would otherwise hit
late: `base:` semantics, rates, sources without input, shapes and an existing tokenizer's vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from typer.testing import CliRunner

from moelab.cli import app
from shared.config import load_config
from shared.config.validation import check_config

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _docs(path: Path, sources: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(sources))], "text": ["some text"] * len(sources),
                             "source": sources}), path)
    return str(path)


def test_base_replaces_rates_and_documents_but_merges_sections(tmp_path):
    docs = _docs(tmp_path / "mine.parquet", ["manpages", "licences"])
    recipe = _write(tmp_path / "mine.yaml", {
        "base": str(ROOT / "configs" / "tiny.yaml"),
        "mixture": {"documents": [docs], "rates": {"manpages": 0.7, "licences": 0.3}},
        "train": {"steps": 7},
    })
    cfg = load_config(recipe)
    assert cfg.mixture.rates == {"manpages": 0.7, "licences": 0.3}  # tiny's three sources are not inherited
    assert cfg.mixture.documents == [docs]
    tiny = load_config(ROOT / "configs" / "tiny.yaml")
    assert cfg.train.steps == 7 and cfg.train.seq_len == tiny.train.seq_len  # a section merges field by field
    assert cfg.model == tiny.model
    res = runner.invoke(app, ["config", "check", recipe])
    assert res.exit_code == 0, res.output
    shown = runner.invoke(app, ["config", "show", recipe, "--recipe"])
    assert shown.exit_code == 0 and yaml.safe_load(shown.output)["mixture"]["rates"] == {"manpages": 0.7, "licences": 0.3}
    resolved = yaml.safe_load(runner.invoke(app, ["config", "show", recipe, "--resolved"]).output)
    assert resolved["mixture"]["rates"] == {"manpages": 0.7, "licences": 0.3} and resolved["train"]["seq_len"] == 128


def test_rates_not_summing_to_1_warn_and_unknown_sources_fail(tmp_path):
    docs = _docs(tmp_path / "d.parquet", ["web", "code"])
    base = [f"mixture.documents=[{docs}]", f"mixture.shard_dir={tmp_path}/tokens"]
    warned = runner.invoke(app, ["config", "check", str(ROOT / "configs/tiny.yaml"), *base,
                                 "mixture.rates={web: 0.9, code: 0.9}"])
    assert warned.exit_code == 0 and "rates sum to 1.8" in warned.output
    bad = runner.invoke(app, ["config", "check", str(ROOT / "configs/tiny.yaml"), *base, "mixture.rates={web: 0.5, wiki: 0.5}"])
    assert bad.exit_code == 2 and "mixture.rates.wiki" in bad.output and "have: code, web" in bad.output


def test_a_source_without_input_files_is_refused(tmp_path):
    cfg = load_config(None, [f"data.inputs=[{{name: man, paths: ['{tmp_path}/nothing-*.jsonl']}}]"])
    errors = [f for f in check_config(cfg) if f.error]
    assert [f.field for f in errors] == ["data.inputs[0].paths"] and "'man'" in errors[0].message


def test_rates_must_name_the_filter_inputs_when_the_mixture_reads_the_filter_output(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    cfg = load_config(None, [f"data.inputs=[{{name: man, paths: ['{tmp_path}/a.jsonl']}}]", "mixture.rates={web: 1.0}"])
    assert [f.field for f in check_config(cfg) if f.error] == ["mixture.rates.web"]


def test_seq_len_longer_than_the_model_and_a_too_small_vocab_fail(tmp_path):
    res = runner.invoke(app, ["config", "check", str(ROOT / "configs/tiny.yaml"), "train.seq_len=512", "model.max_seq_len=256"])
    assert res.exit_code == 2 and "train.seq_len" in res.output and "model.max_seq_len" in res.output
    small = runner.invoke(app, ["config", "check", str(ROOT / "configs/tiny.yaml"), "model.vocab_size=1000"])
    assert small.exit_code == 2 and "model.vocab_size" in small.output


def test_vocab_size_is_checked_against_an_existing_tokenizer(tmp_path):
    from shared.data.tokenizer import train_tokenizer

    texts = [f"document number {i} about tokenizers, vocabularies and {i * 7} embeddings" for i in range(300)]
    train_tokenizer(iter(texts), tmp_path / "tok", vocab_size=400, min_frequency=1)
    vocab = max(json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["vocab"].values()) + 1
    cfg = load_config(None, [f"mixture.tokenizer.path={tmp_path}/tok", f"model.vocab_size={vocab - 1}"])
    errors = [f for f in check_config(cfg) if f.error]
    assert [f.field for f in errors] == ["model.vocab_size"] and str(vocab) in errors[0].message
    assert not [f for f in check_config(load_config(None, [f"mixture.tokenizer.path={tmp_path}/tok",
                                                           f"model.vocab_size={vocab}"])) if f.error]


def test_bias_window_and_router_cooldown_are_checked_against_the_run(tmp_path):
    """The training-time balance arms: a bias window over one update's tokens or over the whole run,
    and a router-LR cooldown shorter than one step, are refused naming the field; sane values pass."""
    tiny = str(ROOT / "configs/tiny.yaml")  # 16 micro-batches of 1 × 128 tokens, bias after each, 200 steps
    B = "model.moe.balance"
    ok = runner.invoke(app, ["config", "check", tiny, f"{B}.bias_update_window_tokens=65536", f"{B}.router_lr_cooldown=0.15"])
    assert ok.exit_code == 0, ok.output
    one_update = runner.invoke(app, ["config", "check", tiny, f"{B}.bias_update_window_tokens=128"])
    assert one_update.exit_code != 0 and "bias_update_window_tokens" in one_update.output
    assert "no more than one bias update's 128" in one_update.output
    per_step = check_config(load_config(tiny, [f"{B}.bias_update_every=step", f"{B}.bias_update_window_tokens=2048"]))
    assert [f.field for f in per_step] == [f"{B}.bias_update_window_tokens"]  # a step is 2,048 tokens
    whole_run = check_config(load_config(tiny, [f"{B}.bias_update_window_tokens=500000"]))
    assert any("never move" in f.message for f in whole_run)  # 200 steps × 2,048 = 409,600 tokens
    short = check_config(load_config(tiny, ["train.steps=3", f"{B}.router_lr_cooldown=0.1"]))
    assert [f.field for f in short] == [f"{B}.router_lr_cooldown"]
    for bad in (f"{B}.router_lr_cooldown=0.6", f"{B}.bias_update_window_tokens=-1"):
        assert runner.invoke(app, ["config", "check", tiny, bad]).exit_code != 0
