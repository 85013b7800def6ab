"""The ablation section fails at config load (`moelab config check`), naming the field, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import ConfigError, load_config

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"
BASE = ["ablation.baseline=raw", "ablation.eval_documents=[held.jsonl]"]


def _load(*overrides: str):
    return load_config(TINY, [*BASE, *overrides])


def test_a_valid_section_loads_with_its_defaults():
    cfg = _load("ablation.arms=[{name: raw, documents: [a.jsonl]}, {name: cur, documents: [b.parquet]}]")
    assert cfg.ablation.seeds == 3 and cfg.ablation.retries == 1 and cfg.ablation.cpus_per_run == 1.0


@pytest.mark.parametrize(("overrides", "message"), [
    (["ablation.arms=[{name: raw, documents: [a]}, {name: raw, documents: [b]}]"], "arm names must be unique"),
    (["ablation.arms=[{name: x, documents: [a]}, {name: y, documents: [b]}]"], "baseline 'raw' is not an arm"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, documents: [b], filter: {}}]"], "exactly one recipe"),
    (["ablation.arms=[{name: raw, documents: [a]}]"], "at least two arms; got 1"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, documents: [b]}]", "ablation.seeds=1"],
     "ablation.seeds = 1"),
    (["ablation.arms=[{name: raw, documents: [a]}, {documents: [b]}]"], "every arm needs a name"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, documents: [b]}]", "ablation.eval_documents=[]"],
     "eval_documents is empty"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, filter: {}}]"], "filters data.inputs, but data.inputs is empty"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, filter: {dedup: {bandz: 3}}}]",
      "data.inputs=[{name: w, paths: [x]}]"], "filter override is invalid at data.filter.dedup.bandz"),
    (["ablation.arms=[{name: raw, documents: [a]}, {name: y, documents: [b]}]", "train.workers=2", "train.dp_size=2"],
     "set train.workers=1"),
])
def test_a_section_that_cannot_work_is_refused_naming_the_problem(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _load(*overrides)


def test_the_demo_ablation_recipes_load_full_and_small():
    from moelab.commands.demo import demo_ablation_overrides

    recipe = Path(__file__).parents[2] / "configs" / "demo-ablation.yaml"
    full = load_config(recipe)
    assert [a.name for a in full.ablation.arms] == ["raw", "filters", "curated"] and full.ablation.seeds == 3
    assert full.ablation.arms[1].filter == {"dedup": {"enabled": False}}
    small = load_config(recipe, demo_ablation_overrides(Path("/repo/runs")))
    assert [a.name for a in small.ablation.arms] == ["raw", "curated"] and small.ablation.seeds == 2
    # absolute under runs/: the Ray job's uploaded working dir leaves git-ignored runs/ out
    assert small.ablation.arms[1].documents == ["/repo/runs/pipeline/demo/kept/train/*.parquet"]
    assert small.ablation.out_dir == "/repo/runs/ablation/demo-small"


def test_the_job_entrypoint_refuses_a_bad_config_with_exit_2(tmp_path, capsys):
    from cluster.ablation.__main__ import main

    assert main([str(TINY), "ablation.seeds=1"]) == 2
    assert "ablation" in capsys.readouterr().err
