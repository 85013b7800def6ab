"""Oracle answers are validated against the rubric schema, retried, cached, and failures recorded."""

from __future__ import annotations

import json

import pytest

from services.scorer.label_cache import LabelCache
from services.scorer.labeling import label_documents
from services.scorer.oracle.base import Oracle
from services.scorer.oracle.heuristic import HeuristicOracle
from services.scorer.rubrics import CODE, GENERAL, InvalidAnswer, rubric_for
from services.scorer.sample_docs import python_docs

GOOD = {"helpfulness": 3, "correctness": 4, "coherence": 2, "complexity": 1, "verbosity": 0}


class ScriptedOracle(Oracle):
    """Answers from a per-document script of raw strings; counts every document sent."""

    name = "scripted"
    model = "scripted-v0"

    def __init__(self, script: dict[str, list[str]]):
        super().__init__()
        self.script = {k: list(v) for k, v in script.items()}

    def _answer(self, requests):
        return [self.script[r.text].pop(0) for r in requests]


@pytest.mark.parametrize(
    "raw",
    [
        "not json at all",
        '{"helpfulness": 3, "correctness": 4, "coherence": 2, "complexity": 1}',  # missing a dimension
        '{"helpfulness": 5, "correctness": 4, "coherence": 2, "complexity": 1, "verbosity": 0}',  # out of range
        '{"helpfulness": "3", "correctness": 4, "coherence": 2, "complexity": 1, "verbosity": 0}',  # string
        '{"helpfulness": 3.5, "correctness": 4, "coherence": 2, "complexity": 1, "verbosity": 0}',  # float
        json.dumps({**GOOD, "extra": 1}),
        '{"helpfulness": 3, ',  # truncated
    ],
)
def test_schema_validation_rejects_malformed_answers(raw):
    with pytest.raises(InvalidAnswer):
        GENERAL.parse(raw)


def test_valid_answer_parses_even_inside_prose_and_code_fences():
    assert GENERAL.parse("Sure!\n```json\n" + json.dumps(GOOD) + "\n```") == GOOD
    assert CODE.json_schema()["properties"]["readability"]["maximum"] == 10


def test_rubric_follows_source_kind():
    assert rubric_for("code") is CODE
    assert {rubric_for(k) for k in ("web", "math", "science")} == {GENERAL}
    with pytest.raises(ValueError, match="unknown source kind"):
        rubric_for("poetry")


def test_invalid_answer_is_retried_then_accepted():
    docs = [{"id": "a", "text": "doc a", "kind": "web"}]
    oracle = ScriptedOracle({"doc a": ["garbage", '{"helpfulness": 9}', json.dumps(GOOD)]})
    out = label_documents(docs, oracle, None, max_retries=3)
    assert out.labels and out.labels[0]["scores"] == [3.0, 4.0, 2.0, 1.0, 0.0]
    assert oracle.calls == 3 and out.retries == 2 and not out.failures


def test_still_invalid_after_retries_is_recorded_with_raw_answer_not_defaulted():
    docs = [{"id": "a", "text": "doc a", "kind": "web"}, {"id": "b", "text": "doc b", "kind": "web"}]
    oracle = ScriptedOracle({"doc a": ["nope", "still nope"], "doc b": [json.dumps(GOOD)]})
    out = label_documents(docs, oracle, None, max_retries=1)
    assert [r["id"] for r in out.labels] == ["b"]
    assert len(out.failures) == 1
    fail = out.failures[0]
    assert fail["id"] == "a" and fail["raw"] == "still nope" and "no JSON object" in fail["error"]
    assert fail["attempts"] == 2


def test_label_cache_avoids_a_second_oracle_call(tmp_path):
    docs = python_docs(6, 4, seed=1)
    first = HeuristicOracle()
    out1 = label_documents(docs, first, LabelCache(tmp_path / "cache.parquet"))
    assert first.calls == 10 and out1.cache_hits == 0
    second = HeuristicOracle()
    out2 = label_documents(docs, second, LabelCache(tmp_path / "cache.parquet"))  # reloaded from disk
    assert second.calls == 0 and out2.cache_hits == 10
    assert [r["scores"] for r in out2.labels] == [r["scores"] for r in out1.labels]


def test_cache_key_includes_rubric_version_and_model(tmp_path):
    docs = python_docs(3, 0, seed=2)
    label_documents(docs, HeuristicOracle(), LabelCache(tmp_path / "c.parquet"))
    other = ScriptedOracle({d["text"]: [json.dumps(GOOD)] for d in docs})  # a different model name
    label_documents(docs, other, LabelCache(tmp_path / "c.parquet"))
    assert other.calls == 3


def test_heuristic_oracle_is_deterministic_and_named_as_stand_in():
    docs = python_docs(5, 5, seed=3)
    a = label_documents(docs, HeuristicOracle(), None).labels
    b = label_documents(docs, HeuristicOracle(), None).labels
    assert a == b and HeuristicOracle.is_stand_in and "stand-in" in HeuristicOracle.model
