"""Keep-rate arms: the scorer's scored set re-selected at 30/50/70% per source, checked before training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster.ablation.documents import RecipeError
from cluster.ablation.keep_rate import select_at_keep_rate
from cluster.ablation.prepare import prepare
from shared.config import ConfigError, load_config
from tests.cluster.ablation_corpus import ablation_config, garbage, sentences

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"


def write_scores(folder: Path, rows: list[dict], name: str = "part-0.parquet") -> Path:
    """A score stage's output as the stage writes it: one shard and the manifest declaring it."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{"judge_skipped": False, "keep": False, **r} for r in rows])
    pq.write_table(table, folder / name)
    (folder / "manifest.json").write_text(json.dumps({"shards": [{"name": name, "bytes": (folder / name).stat().st_size}]}))
    return folder


def graded_rows() -> list[dict]:
    """Ten web documents of quality 0.0 .. 0.9 and four code documents of 0.1 .. 0.4 (the two lowest
    web ones scored by the Probe alone, one code document with no score at all)."""
    web = [{"id": f"w{i}", "text": f"web {i}", "source": "web", "quality": i / 10, "judge_skipped": i < 2}
           for i in range(10)]
    code = [{"id": f"c{i}", "text": f"code {i}", "source": "code", "quality": (i + 1) / 10} for i in range(4)]
    code.append({"id": "c-nan", "text": "code nan", "source": "code", "quality": math.nan})
    return web + code


@pytest.mark.parametrize(("rate", "web_kept", "code_kept"), [(0.3, 3, 1), (0.5, 5, 2), (0.7, 7, 3)])
def test_each_source_keeps_its_highest_quality_fraction(tmp_path, rate, web_kept, code_kept):
    scores = write_scores(tmp_path / "scores", graded_rows())
    files, key = select_at_keep_rate("kr", str(scores), rate, tmp_path / "sel")
    kept = {f.stem: pq.read_table(f).to_pylist() for f in files}
    assert [r["id"] for r in kept["web"]] == sorted(f"w{i}" for i in range(10 - web_kept, 10))
    assert len(kept["code"]) == code_kept and "c-nan" not in {r["id"] for r in kept["code"]}
    assert set(kept["web"][0]) == {"id", "text", "source"}
    sel = key["selection"]
    assert sel["web"]["kept"] == web_kept and sel["code"]["unscored"] == 1
    assert sel["web"]["probe_only_kept"] == 0  # the Probe-only documents are the lowest: not kept up to 70%


def test_probe_only_documents_that_rank_in_are_counted(tmp_path):
    scores = write_scores(tmp_path / "scores", graded_rows())
    _, key = select_at_keep_rate("kr", str(scores), 0.9, tmp_path / "sel")
    assert key["selection"]["web"] == {"scored": 10, "kept": 9, "unscored": 0, "tau_keep": 0.1, "probe_only_kept": 1}


def test_a_changed_rate_reselects_and_the_same_rate_reuses(tmp_path):
    scores = write_scores(tmp_path / "scores", graded_rows())
    select_at_keep_rate("kr", str(scores), 0.3, tmp_path / "sel")
    marker = (tmp_path / "sel" / "selected.json").stat().st_mtime_ns
    select_at_keep_rate("kr", str(scores), 0.3, tmp_path / "sel")
    assert (tmp_path / "sel" / "selected.json").stat().st_mtime_ns == marker
    files, _ = select_at_keep_rate("kr", str(scores), 0.5, tmp_path / "sel")
    assert sum(pq.read_metadata(f).num_rows for f in files) == 5 + 2


def test_an_unfinished_score_stage_is_refused_naming_the_arm(tmp_path):
    (tmp_path / "scores").mkdir()
    with pytest.raises(RecipeError, match=r"ablation arm 'kr': .*manifest.json not found: the scorer has not finished"):
        select_at_keep_rate("kr", str(tmp_path / "scores"), 0.5, tmp_path / "sel")


def test_a_shard_without_quality_is_refused(tmp_path):
    scores = write_scores(tmp_path / "scores", [{"id": "a", "text": "t", "source": "web", "quality": 0.5}])
    pq.write_table(pa.table({"id": ["a"], "text": ["t"], "source": ["web"]}), scores / "part-0.parquet")
    manifest = {"shards": [{"name": "part-0.parquet"}]}
    (scores / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecipeError, match=r"has no column\(s\) \['quality'\]: not a score stage shard"):
        select_at_keep_rate("kr", str(scores), 0.5, tmp_path / "sel")


@pytest.mark.parametrize(("arm", "message"), [
    ("{name: y, scores: s}", "`scores` and `keep_rate` go together"),
    ("{name: y, documents: [b], keep_rate: 0.5}", "`scores` and `keep_rate` go together"),
    ("{name: y, documents: [b], scores: s, keep_rate: 0.5}", "exactly one recipe"),
    ("{name: y, scores: s, keep_rate: 0}", "keep_rate"),
    ("{name: y, scores: s, keep_rate: 1.5}", "keep_rate"),
])
def test_a_keep_rate_arm_that_cannot_work_fails_at_config_load(arm, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TINY, ["ablation.baseline=raw", "ablation.eval_documents=[held.jsonl]",
                           f"ablation.arms=[{{name: raw, documents: [a]}}, {arm}]"])


def test_keep_rate_arms_prepare_from_the_scored_set_with_their_selection_reported(tmp_path):
    """Scored clean and garbage documents: at 50% the arm keeps the clean half (higher quality)."""
    import random

    rng = random.Random(3)
    rows = [{"id": f"c{i}", "text": sentences(rng, 6), "source": "prose", "quality": 0.6 + i / 1000} for i in range(40)]
    rows += [{"id": f"g{i}", "text": garbage(rng, 40), "source": "prose", "quality": 0.1 + i / 1000} for i in range(40)]
    scores = write_scores(tmp_path / "scores", rows)
    cfg = ablation_config(tmp_path)
    arms = [cfg.ablation.arms[0],
            *(cfg.ablation.arms[0].model_copy(update={"name": f"keep{int(r * 100)}", "documents": [],
                                                      "scores": str(scores), "keep_rate": r}) for r in (0.5, 0.7))]
    cfg = cfg.model_copy(update={"ablation": cfg.ablation.model_copy(update={"arms": arms})})
    plans, _ = prepare(cfg, log=lambda *_: None)
    by_name = {p.name: p for p in plans}
    half = by_name["keep50"].report["documents"]
    assert half["keep_rate"] == 0.5 and half["selection"]["prose"]["kept"] == 40 and half["written"] == 40
    ids = [i for p in by_name["keep50"].cfg.mixture.documents for i in pq.read_table(p).column("id").to_pylist()]
    assert sorted(ids) == sorted(f"c{i}" for i in range(40))
    assert by_name["keep70"].report["documents"]["selection"]["prose"]["kept"] == 56
