"""Chains: built from the registry in config order, merged onto their kind's defaults, per input;
`moelab config check` rejects unknown filters, fields and chains; the documented recipe runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from moelab.cli import app
from services.data_filter.accounting import Chain
from services.data_filter.filters import FILTERS, Doc, build_chain, register_filter
from services.data_filter.pipeline import run
from shared.config.chains import ChainConfig
from shared.config.data import DataConfig
from shared.config.filters import FILTER_SETTINGS
from shared.config.kinds import SOURCE_KINDS
from shared.config.loader import ConfigError, load_config
from tests.services.data_filter import realtext
from tests.services.data_filter.shout_filter import ShoutFilter

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def shout():
    """The toy filter of `shout_filter.py`, registered with its one line and taken out afterwards."""
    register_filter(ShoutFilter, before="toxicity")
    yield ShoutFilter
    FILTER_SETTINGS.pop("shout")
    FILTERS.pop("shout")


def test_every_registered_setting_has_a_filter_class_and_chains_follow_registry_order():
    assert set(FILTERS) >= set(FILTER_SETTINGS) - {"shout"}
    names = [f.name for f in build_chain(load_config(None).data.filter.chains["web"])]
    assert names == [n for n in FILTER_SETTINGS if n in names]
    assert names[:3] == ["normalize", "length", "language"] and "perplexity" not in names  # fitted: a later pass


def test_a_toy_filter_registered_from_a_test_module_runs_in_a_chain(shout):
    cfg = load_config(None, ["data.filter.chains.web.shout.enabled=true", "data.filter.chains.web.language.enabled=false"])
    chain = build_chain(cfg.data.filter.chains["web"])
    assert [f.name for f in chain].index("shout") == [f.name for f in chain].index("fineweb") + 1
    text = realtext.prose_doc(6, start=40)
    assert Chain(chain).run(Doc("a", text, "s")) is None
    assert Chain(chain).run(Doc("b", text.upper(), "s")) == ("shout", "too_much_upper_case")
    with pytest.raises(ConfigError, match="chains.web.shout.max_upper_ratio = 2"):
        load_config(None, ["data.filter.chains.web.shout.max_upper_ratio=2"])


def test_a_toy_filter_registered_from_a_test_module_removes_its_documents_in_the_real_stage(shout, tmp_path):
    """The filter stage as `moelab data filter` runs it (readers, chains, dedup, shards, stats):
    the registered filter is configured like a built-in one and its removals are counted by reason."""
    docs = [{"id": f"doc-{i}", "text": realtext.prose_doc(3, start=i * 3)} for i in range(12)]
    docs += [{"id": f"loud-{i}", "text": d["text"].upper()} for i, d in enumerate(docs[:4])]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    data = DataConfig.model_validate({
        "inputs": [{"name": "src", "kind": "web", "paths": [str(path)]}],
        "filter": {"workers": 0, "chains": {"web": {"shout": {"enabled": True}, "language": {"enabled": False}}}}})
    stats = run(data, tmp_path / "out")
    assert stats["sources"]["src"]["removed"]["shout:too_much_upper_case"] == 4
    kept = {i for p in (tmp_path / "out").glob("part-*.parquet") for i in pq.read_table(p, columns=["id"]).column("id").to_pylist()}
    assert kept and not any(i.startswith("loud-") for i in kept)


def test_one_chain_in_a_recipe_changes_one_field_and_keeps_every_other_kind():
    cfg = load_config(None, ["data.filter.chains.web.language.languages=[en, es]"])
    chains = cfg.data.filter.chains
    assert set(chains) == set(SOURCE_KINDS)
    assert chains["web"]["language"].languages == ["en", "es"] and chains["web"]["language"].min_score == 0.65
    assert chains["code"]["code"].enabled and not chains["code"]["gopher_quality"].enabled
    assert chains["science"].enabled() == [n for n in chains["web"].enabled() if n != "c4"]


def test_an_input_override_is_merged_onto_its_chain_for_that_input_only():
    data = DataConfig.model_validate({"inputs": [
        {"name": "es", "kind": "web", "paths": ["x"], "filter": {"language": {"languages": ["es"]}}},
        {"name": "en", "kind": "web", "paths": ["y"]},
        {"name": "shared", "kind": "web", "paths": ["z"], "chain": "prose_de"}],
        "filter": {"chains": {"prose_de": {"extends": "web", "language": {"languages": ["de"]}}}}})
    chains = data.resolved_chains()
    assert chains["es"]["language"].languages == ["es"] and chains["en"]["language"].languages == ["en"]
    assert chains["es"]["toxicity"] == chains["en"]["toxicity"]
    assert chains["shared"]["language"].languages == ["de"] and chains["shared"]["c4"].enabled


@pytest.mark.parametrize(("override", "message"), [
    ("data.filter.chains.web.langauge.languages=[en]", "data.filter.chains.web.langauge: unknown filter; did you mean 'language'?"),
    ("data.filter.chains.web.toxicity.max_ratoi=0.1", "data.filter.chains.web.toxicity.max_ratoi = 0.1: unknown key"),
    ("data.filter.chains.math.perplexity.fence=0", "data.filter.chains.math.perplexity.fence = 0"),
    ("data.inputs=[{name: a, paths: [x], chain: spanish}]", "data.inputs.0.chain = 'spanish': no chain named 'spanish'"),
    ("data.inputs=[{name: a, paths: [x], filter: {c4: {min_sentence: 2}}}]", "data.inputs.0.filter.c4.min_sentence = 2: unknown key"),
    ("data.inputs=[{name: a, paths: [x], filter: {gopher_quality: {by_language: {de: {min_words: -1}}}}}]",
     "data.inputs.0.filter.gopher_quality: by_language.de.min_words"),
    ("data.filter.chains.science.language.strip_markup=[latex, html]",
     "data.filter.chains.science.language.strip_markup.1 = 'html': Input should be 'latex' or 'code'"),
])
def test_config_check_names_the_bad_field(override, message, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: t\n")
    res = CliRunner().invoke(app, ["config", "check", str(recipe), override])
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output


def test_a_resolved_chain_round_trips_through_json():
    chain = load_config(None).data.filter.chains["math"]
    assert ChainConfig.model_validate(json.loads(chain.model_dump_json())) == chain


def _doc_recipe() -> str:
    text = (ROOT / "docs" / "data_filter.md").read_text(encoding="utf-8")
    return re.search(r"A recipe needs only inputs.*?```yaml\n(.*?)```", text, re.S).group(1)


def test_the_documented_recipe_runs_as_written(tmp_path, monkeypatch):
    """The docs/data_filter.md recipe, verbatim: English and Spanish prose plus Go code, every input kept."""
    import gzip

    import pyarrow as pa
    import zstandard

    monkeypatch.chdir(tmp_path)
    (tmp_path / "raw" / "web").mkdir(parents=True)
    (tmp_path / "raw" / "code").mkdir()
    (tmp_path / "raw" / "math").mkdir()
    web = [{"id": d["id"], "text": d["text"]} for d in realtext.demo_documents("wiki")[:60]]
    handbook_es = [d for d in realtext.demo_documents("handbook") if d["id"].startswith("handbook/es-ES")][:30]
    web += [{"id": d["id"], "text": d["text"]} for d in handbook_es]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in web).encode()
    (tmp_path / "raw" / "web" / "part.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    go = realtext.demo_documents("go")[:40]
    pq.write_table(pa.table({"id": [d["id"] for d in go], "text": [d["text"] for d in go]}), tmp_path / "raw" / "code" / "go.parquet")
    math = realtext.demo_documents("sympy")[:40]
    with gzip.open(tmp_path / "raw" / "math" / "sympy.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"id": d["id"], "text": d["text"]}) + "\n" for d in math)
    (tmp_path / "recipe.yaml").write_text(_doc_recipe() + "tracker: {mode: disabled}\n")
    runner = CliRunner()
    res = runner.invoke(app, ["config", "check", "recipe.yaml"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["data", "filter", "recipe.yaml", "data.filter.workers=0"])
    assert res.exit_code == 0, res.output
    stats = json.loads((tmp_path / "runs" / "data" / "stats.json").read_text())
    sources = stats["sources"]
    assert sources["code"]["written"] >= 0.9 * len(go)
    assert sources["web"]["written"] >= 0.8 * len(web)
    assert sources["web"]["removed"].get("gopher_quality:too_few_stop_words", 0) == 0
    spanish = sum(1 for p in (tmp_path / "runs" / "data").glob("part-*.parquet")
                  for i in pq.read_table(p, columns=["id"]).column("id").to_pylist() if i.startswith("handbook/es-ES"))
    assert spanish >= 0.8 * len(handbook_es)


def test_the_math_chain_keeps_formal_notation_and_still_removes_a_repeated_page():
    """Gopher's word n-gram rules removed 73% of the demo's Metamath statements (symbols are not words)."""
    cfg = DataConfig().filter.chains["math"]
    assert cfg["repetition"].top_ngram_max_frac == {} and cfg["repetition"].dup_ngram_max_frac == {}
    chain = Chain(build_chain(cfg), review=True)
    metamath = realtext.demo_documents("metamath")
    kept = sum(chain.run(Doc(r["id"], r["text"], "metamath", "math")) is None for r in metamath) / len(metamath)
    assert kept >= 0.98, kept
    page = metamath[0]["text"]
    assert chain.run(Doc("twice", page + "\n\n" + page + "\n\n" + page, "metamath", "math")) == ("repetition", "dup_para_char_frac")
