"""Token shards follow their documents: a changed document file is rebuilt, a missing one refused."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from services.trainer.data import prepare_shards, with_parquet_documents
from shared.data.shards import ShardError
from tests.services.trainer.conftest import tiny_cfg, write_docs


def _docs(tmp_path: Path):
    from pydoc_data.topics import topics

    texts = [t for _, t in sorted(topics.items()) if len(t) > 200]
    return write_docs(tmp_path / "train", texts[:40], "web"), write_docs(tmp_path / "eval", texts[-4:], "web"), texts


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_changed_documents_rebuild_their_shards_and_a_rerun_builds_nothing(tmp_path):
    train, held_out, texts = _docs(tmp_path)
    cfg = tiny_cfg(tmp_path, (train, held_out))
    prepare_shards(cfg, 0)
    before = _manifest(tmp_path / "tokens")
    assert before["docs"] == 40
    prepare_shards(cfg, 0)
    assert _manifest(tmp_path / "tokens")["build"]["items_built"] == 0  # nothing changed: nothing rebuilt

    write_docs(tmp_path / "train", texts[:60], "web")  # the same file now holds 20 more documents
    prepare_shards(cfg, 0)
    after = _manifest(tmp_path / "tokens")
    assert after["docs"] == 60 and after["build"]["items_built"] == 1
    assert after["tokens"] > before["tokens"]


def test_a_missing_eval_file_is_refused_not_evaluated_on_old_shards(tmp_path):
    train, held_out, _ = _docs(tmp_path)
    cfg = tiny_cfg(tmp_path, (train, held_out))
    prepare_shards(cfg, 0)
    assert (tmp_path / "tokens-eval" / "manifest.json").is_file()
    (tmp_path / "eval" / "part-0.parquet").unlink()
    with pytest.raises(ShardError, match="eval"):
        prepare_shards(cfg, 0)


def test_a_changed_raw_jsonl_is_copied_again(tmp_path):
    raw = tmp_path / "raw" / "notes.jsonl"
    raw.parent.mkdir()
    raw.write_text("".join(json.dumps({"id": f"n{i}", "text": f"note {i} " * 30}) + "\n" for i in range(5)))
    train, held_out, _ = _docs(tmp_path)
    cfg = tiny_cfg(tmp_path, (str(raw), held_out))
    first = with_parquet_documents(cfg).mixture.documents[0]
    assert pq.read_metadata(first).num_rows == 5
    raw.write_text(raw.read_text() + json.dumps({"id": "n5", "text": "a late note " * 20}) + "\n")
    again = with_parquet_documents(cfg).mixture.documents[0]
    assert again == first and pq.read_metadata(again).num_rows == 6


def test_held_out_shards_use_the_training_documents_tokenizer_and_new_training_documents_retrain_it(tmp_path):
    train, held_out, texts = _docs(tmp_path)
    cfg = tiny_cfg(tmp_path, (train, held_out))
    prepare_shards(cfg, 0)
    first = _manifest(tmp_path / "tokens")["tokenizer"]["hash"]
    assert _manifest(tmp_path / "tokens-eval")["tokenizer"]["hash"] == first  # never one trained on held-out text

    write_docs(tmp_path / "train", texts[5:45], "web")  # other training documents under the same file name
    prepare_shards(cfg, 0)
    second = _manifest(tmp_path / "tokens")["tokenizer"]["hash"]
    assert second != first, "the tokenizer was reused although its training documents changed"
    assert _manifest(tmp_path / "tokens-eval")["tokenizer"]["hash"] == second  # and the held-out shards follow
